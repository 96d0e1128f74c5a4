"""``python -m tricomb``: the ``tricomb`` command (:func:`tricomb.cli.main`)."""
from .cli import main

raise SystemExit(main())
