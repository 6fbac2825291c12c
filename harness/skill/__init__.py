"""The skill's tooling: installing it for Claude Code and Codex (``install``, with the permissions of
``claude_settings``) and checking its text (``lint``: format, and every ``eau`` command it names
against the CLI's command tree, which the caller passes in)."""
