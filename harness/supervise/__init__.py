"""The meta-agent side of a run: ``eau supervise`` and ``eau autopilot``.

``runwatch``: following a live run from outside (progress, the every-N schedule) · ``agents``:
command lines of Claude Code, Codex or any command, and what their output reports · ``prompt``:
the session prompt template · ``session``: one agent session (folder, process group, bounds,
result) · ``supervisor``: the supervise loop · ``cli_client``: ``eau`` commands as subprocesses ·
``interventions`` (+ ``interventions.yaml``): the autopilot's table · ``autopilot``: the rule-based
meta-agent.
"""
