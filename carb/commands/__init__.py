"""The command layer: thin Hydra entry points (``carb-collect``, ``carb-train``, ``carb-tune``,
``carb-promote``, ``carb-characterize``, ``carb-screen``, ``carb-quickstart``), each a ``main`` that
calls a plain ``run_<command>(cfg)`` which tests call directly, and their shared plumbing
(:mod:`~carb.commands.cli`). The only package that imports Hydra."""
