"""One-off studies: measurements and checks behind a number in docs/RESULTS.md or a constant of the model
(their data under ``scripts/data/``). Not part of the product; run from the repository root."""
