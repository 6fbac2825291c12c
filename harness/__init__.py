"""EAU harness: train user-centric LLM agents with PPO while a coding agent co-evolves the setup."""

__version__ = "0.1.0"
