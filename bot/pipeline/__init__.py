"""One path for every message: intake (dedupe, gate), the four resolutions
(user, budget, persona, conversation), run control, the run, persisting the
turn and delivery."""
