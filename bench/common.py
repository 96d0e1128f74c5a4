"""What the benchmark scripts share: the name of the card a run's results are filed under, and writing them."""
from __future__ import annotations

import json
from pathlib import Path


def card(gpu: str) -> str:
    """The card's short name in lower case ("h100" for "NVIDIA H100 80GB HBM3"), "gpu" where none is found."""
    return next((w.lower() for w in gpu.split() if w[:1] in "HAB" and w[1:].isdigit()), "gpu")


def write_results(out: str, name: str, meta: dict, payload: dict, markdown: str) -> None:
    """``bench/results``-style files ``{card}-{name}-{commit}.json`` (``meta`` and ``payload``) and ``.md``
    (``markdown``), under ``out``; the markdown is printed too."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{card(meta['gpu'])}-{name}-{meta['commit']}"
    (folder / f"{stem}.json").write_text(json.dumps({**meta, **payload}, indent=1))
    (folder / f"{stem}.md").write_text(markdown)
    print(markdown)
