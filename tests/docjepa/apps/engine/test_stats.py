"""The dashboard figure with a whole team: its per-day legend stays readable and inside its panel."""

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def _team_stats(people: int, days: int = 5) -> dict:
    from docjepa.apps.engine.stats import RATES

    rng = np.random.default_rng(0)
    names = [f"annotator-{i:02d}" for i in range(people)]
    per_day = {f"2026-11-{20 + d}": {n: int(rng.integers(1, 40)) for n in names} for d in range(days)}
    by_person = {n: {"annotations": 10, "seconds_per_mask_median": float(rng.uniform(3, 9))} for n in names}
    version = {"annotations": 10, "edits_per_mask_mean": 1.5} | {key: 0.25 for key in RATES.values()}
    total = sum(sum(d.values()) for d in per_day.values())
    versions = {"shipped:abc": version}
    return {"per_day": per_day, "by_person": by_person, "by_model_version": versions, "annotations": total}


@pytest.mark.parametrize("people", [3, 50])
def test_the_per_day_legend_names_the_most_active_and_fits_its_panel(people):
    import matplotlib.pyplot as plt

    from docjepa.apps.engine.stats import LEGEND_PEOPLE, figure, per_day_series, plot

    stats = _team_stats(people)
    series = per_day_series(stats["per_day"])
    totals = {p: sum(d[p] for d in stats["per_day"].values()) for p in stats["by_person"]}
    top = sorted(totals, key=lambda p: (-totals[p], p))[:LEGEND_PEOPLE]
    assert list(series)[: len(top)] == top
    assert np.sum(list(series.values())) == stats["annotations"]  # every annotation is in some bar
    if people > LEGEND_PEOPLE:
        assert list(series)[-1] == f"others ({people - LEGEND_PEOPLE} people)"
    fig = figure(stats)
    fig.canvas.draw()
    ax = fig.axes[0]
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == list(series)
    inside, box = ax.get_window_extent(), legend.get_window_extent()
    assert box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1
    tops = max(sum(s[i] for s in series.values()) for i in range(len(stats["per_day"])))
    bars_top = ax.transData.transform((0, tops))[1]
    assert box.y0 >= bars_top  # the legend sits above the tallest bar, not over it
    plt.close(fig)
    assert plot(stats)[:4] == b"\x89PNG"
