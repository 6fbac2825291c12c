"""File I/O every other room shares, at the bottom of the package: append-only JSONL with torn-line
recovery (``jsonl``) and bounded, round-trip YAML reading plus atomic writes (``yamlio``). Nothing
here imports another part of the harness."""
