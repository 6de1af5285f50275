"""Repository scripts: documentation generation (``results``, ``figures``, ``example``), benchmarks
(``bench/``) and one-off studies (``studies/``). Not part of the installed package; tests import them as
``scripts.<module>`` from the repository root."""
