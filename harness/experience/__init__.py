"""The experience pool and the skill that reads and writes it.

``finding``: one finding (markdown + YAML front matter) and its validation · ``pool``: the folder of
findings, ids, retraction, ``INDEX.md`` · ``index``: the generated index · ``search``: the ranking of
``eau finding search`` · ``skill_install``: ``eau skill install`` · ``claude_settings``: the Claude Code
permission set it merges · ``skill_lint``: checks that keep ``skill/`` in step with the CLI.
"""
