"""Serving: SGLang launches and what measures a drafter behind one, in four rooms.

launch/ renders and checks a launch and runs, watches and stops the server; engine/ is eyas's reference
engine and the in-process decoding it shares with eval; evaluation/ judges a drafter's outputs (offline
acceptance, first divergences, the load smoke test); benchmark/ measures speed (the load client, the config
sweep, its statistics, report and release gate). prompts/ holds the prompt sets they send. launch/ and
engine/ import neither of the others; evaluation/ imports both; benchmark/ imports launch/ and evaluation/.
Rendering and checking a launch imports no torch; decoding (engine/) does.
"""
