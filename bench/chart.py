"""A bar chart (PNG) of GB/s per case and implementation from a results file of ``bench/run.py``.

    python bench/chart.py bench/results/h200.json     # writes bench/results/h200.png (needs matplotlib)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


def chart(results: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = json.loads(results.read_text())
    cases = data["cases"]
    names = []
    for row in cases:
        names += [n for n in row["impls"] if n not in names]
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(cases)), 4.5))
    for k, name in enumerate(names):
        xs = [i + k * width for i, row in enumerate(cases) if name in row["impls"]]
        ys = [row["impls"][name]["GBps"] for row in cases if name in row["impls"]]
        ax.bar(xs, ys, width, label=name)
    ax.axhline(data["C_GBps"], color="black", linewidth=0.8, linestyle="--", label="copy ceiling C")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(cases))], [row["case"] for row in cases])
    ax.set_ylabel("GB/s (unique bytes)")
    ax.set_title(f"tricomb on {data['gpu']}, commit {data['commit'][:7]}, torch {data['torch']}, "
                 f"triton {data['triton']}", fontsize=9)
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    png = results.with_suffix(".png")
    fig.savefig(png, dpi=120)
    return png


if __name__ == "__main__":
    print(chart(Path(sys.argv[1])))
