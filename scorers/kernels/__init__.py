"""The model-call kernels every schedule of `jet` (`execution.py`, `sequential.py`) and FastJEV (`fastjev/`) is
built from, one module per job:

- `prefix`: `prefix_call`, a context once with a cache; its last logits give the log-probs of the first
  candidate tokens (and `prefix_inputs`, the extra inputs of image prefixes).
- `tree`: `TreeCall`, the tokens of a packed call as a forest. Every key (cached or fed) has a parent key and
  an explicit position; a token sees its ancestors and itself, nothing else. `jet`'s packed row (prefix, then
  candidate chains hanging from its last token), a shared context with several questions' tails under it,
  and FastJEV's candidate tries are all such forests. `run_rows`: several `TreeCall`s as left-padded batch
  rows of ONE forward call, each with a dense ancestor mask (any attention implementation; attention-only
  models), optionally over a cache of their first keys; `run_chains`: right-padded chains continuing one cache
  (padding after a chain's last token changes none of its outputs, so recurrent layers may run them too);
  `row_states`: the states of a packed row's keys read back from the cache of `run_rows`.
- `logprobs`: `gather_sums` / `gather_by_owner`, summed log_softmax of the target tokens per owner; only the
  sums leave the device (with `greedy`, also whether every target is its row's argmax: lm-eval's `is_greedy`).
- `packing`: `row_batches` / `greedy_groups`, how items of given sizes fill calls of a token capacity;
  `shared_prefix_groups` / `shared_rows`, runs of neighbouring questions whose prefixes begin alike, packed as
  rows with the common part once.
- `kept_prefix`: `KeptPrefix`, one text prefix's keys/values kept between calls (`jet`'s `reuse_prefix`).
- `accounting`: `Work` / `Scored`, the counters and result of a question; `state_bytes` / `live_bytes`, the
  one byte counter of cached states (per tensor, or per distinct storage).
Masked row calls read keys through grouped-query attention (`attention.grouped_rows`, no `repeat_kv`).
"""
