"""``interp report`` on a tiny trained checkpoint: one page, plotly.js embedded once, every figure at most 1350 px
wide (the page's column is 1400 px), and the instrument tables are those of ``run_instruments``."""

import json
import re

import pytest

from interp.instruments.plots import MAX_WIDTH
from interp.instruments.report import InstrumentSettings, build_report, instrument_tasks, run_instruments
from interp.model.checkpoint import load_model
from interp.training.train import TrainConfig, train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "tiny.safetensors"
    train(TrainConfig(d=4, k=3, n=64, steps=20, batch=8, val_tasks=16, eval_every=10), path, progress=False)
    return path


def test_report_page_embeds_plotly_once_and_fits_the_column(checkpoint, tmp_path, one_torch_thread):
    page = build_report(str(checkpoint), tmp_path / "report.html", n_tasks=4).read_text()
    assert page.count("<script type='text/javascript'>") == 1  # plotly.js, once, in the head
    body = page.split("</head>", 1)[1]
    # history, evaluation, probes, similarity, heatmaps, attention maps, ablations
    assert body.count('class="plotly-graph-div"') == 7
    widths = [int(w) for w in re.findall(r'"width":(\d+)', body)]  # the figures' layout widths
    assert len(widths) >= 7 and max(widths) <= MAX_WIDTH == 1350
    for heading in ("Linear probes", "Weights beside the construction", "Activation patching", "Ablations",
                    "What did it learn?"):
        assert heading in page
    assert re.search(r"paper [12]", body)  # headings cite the papers, not files outside the repository


def test_instrument_tasks_are_seeded_and_results_repeat(checkpoint, one_torch_thread):
    model = load_model(checkpoint)
    settings = InstrumentSettings(probe_tasks=6, n=64, seed=3)
    tasks, init = instrument_tasks(model, settings)
    again, init_again = instrument_tasks(model, settings)
    assert tasks.points.shape == (6, 64, 4) and init.shape == (6, 3, 4)
    assert (tasks.points == again.points).all() and (init == init_again).all()
    first, second = run_instruments(model, settings), run_instruments(model, settings)
    assert json.dumps([p.value for p in first.probes]) == json.dumps([p.value for p in second.probes])
    intact = next(row for row in first.ablations if row["ablation"] == "intact")
    assert intact["change"] == 0.0
    centroid_patch = next(e for e in first.patching if e.kind == "centroids")
    assert centroid_patch.restored == pytest.approx(1.0, abs=1e-9)  # the whole centroid stream restores the run
