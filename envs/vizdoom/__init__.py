"""ViZDoom, all in one place: the env (`env`), the pixel features of its screen (`perception`), the observation
as text (`text`: status line and screen sentence) and the scripted expert (`expert`)."""
