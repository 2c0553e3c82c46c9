"""Training the scorer: PPO from reward and SFT from labels, on the differentiable packed scoring path.

- `policy.Policy`: the scorer's model with a LoRA adapter (or every weight trainable) and a value head.
- `ppo`: rollouts with the scorer agent, GAE, the clipped objective (`PPOOptions`).
- `sft`: the gold NLL over the candidates (`SFTOptions`).
- `run`: `run_ppo` / `run_sft` into a results folder (checkpoints, resume, `train.jsonl`, `adapter/`).
The trained adapter is loaded by every job with `model.adapter=PATH` (`jetgym.scorers.adapters`).
"""
