"""Quoted numbers come from committed files: README.md's generated blocks and the tables and verdicts of
analyses/RESULTS.md must follow from the committed CSV/JSON in analyses/results/ (no recomputation: the same
section-writing functions the scripts use are run on the committed rows), and the results are data only."""

import json
import re
from pathlib import Path

import pytest

from analyses import _studies as S
from analyses import figures, readme
from analyses._shared import read_csv

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "analyses" / "results"
STUDIES = RESULTS / "studies"
SECTIONS = readme.study_sections((ROOT / "analyses" / "RESULTS.md").read_text())


def _assert_lines_in(expected_lines: list[str], section: str, what: str) -> None:
    present = set(section.splitlines())
    missing = [line for line in expected_lines if line.strip() and line not in present]
    assert not missing, f"{what}: RESULTS.md lacks (or has other numbers than) these lines:\n" + "\n".join(missing)


# ----- README.md -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", readme.BLOCKS)
def test_generated_block_matches_the_committed_files(name):
    document = readme.README if name in readme.IN_README else readme.RESULTS_MD
    generated = getattr(readme, f"{name}_block")()
    assert readme.block_in(document.read_text(), name) == generated, (
        f"{document.name} block {name!r} is stale: python -m analyses render")


def test_readme_is_a_front_door():
    """README.md stays short (at most 120 lines) with one generated table; the rest is in analyses/RESULTS.md."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 120
    assert re.findall(r"<!-- generated:(\w+) -->", text) == list(readme.IN_README)


def test_fill_replaces_only_between_markers_and_names_a_missing_marker():
    text = "head\n<!-- generated:speed -->\nold\n<!-- /generated:speed -->\ntail\n"
    expected = "head\n<!-- generated:speed -->\nnew\n<!-- /generated:speed -->\ntail\n"
    assert readme.fill(text, {"speed": "new"}) == expected
    with pytest.raises(readme.MarkerError, match="<!-- generated:learning -->"):
        readme.fill(text, {"learning": "x"})
    with pytest.raises(readme.MarkerError, match="before"):
        readme.block_in("<!-- /generated:speed -->\n<!-- generated:speed -->", "speed")


# ----- RESULTS.md: studies ---------------------------------------------------------------------------------------
def _study_names() -> list[str]:
    """The grid studies of the registry whose section is in RESULTS.md."""
    from analyses.framework import registry
    from analyses.framework.grid import GridStudy

    return [name for name, study in registry.studies().items() if isinstance(study, GridStudy) and name in SECTIONS]


@pytest.mark.parametrize("name", _study_names())
def test_study_section_tables_and_verdicts_follow_from_its_csv(name, tmp_path):
    """The section's table and every verdict line follow from the committed rows and training curves (the
    ``_histories.jsonl``; no checkpoint is read: ``tmp_path`` holds none), at the budget its Command line names."""
    from analyses.claims import verdict_lines
    from analyses.framework import registry
    from analyses.framework.grid import committed_budget, decided, histories_by_label

    section = SECTIONS[name]
    rows = S.study_csv_rows(STUDIES, name)
    study, budget = registry.get(name), committed_budget(name, STUDIES)
    assert f"Command: `python -m analyses run {name} --budget {budget.name}`" in section
    # every row of the budget's seeds and steps (a study still training has rows of some of its seeds)
    assert {int(r["seed"]) for r in rows} <= set(budget.seeds) and {int(r["steps"]) for r in rows} == {budget.steps}
    _assert_lines_in(S.summary_table(rows).splitlines(), section, f"{name} summary table")
    _assert_lines_in(study.extra(S.by_label(rows)).splitlines(), section, f"{name} transfer grid")
    histories = histories_by_label(STUDIES / f"{name}.csv", tmp_path, rows)
    results = decided(study, rows, histories)
    _assert_lines_in(verdict_lines(results) if results else [], section, f"{name} verdicts")
    assert S.figure_line(name) in section and name in figures.available()


@pytest.mark.parametrize("name", ["embedding_across_pairs", "n_d4k16"])
def test_sections_of_other_studies_rows_follow_from_the_committed_rows(name):
    from analyses.framework import registry
    from analyses.framework.runner import running

    with running(f"python -m analyses run {name} --budget paper"):
        expected = registry.get(name).sections[name]()
    _assert_lines_in(expected.splitlines(), SECTIONS[name], name)


@pytest.mark.parametrize("name", [n for n in SECTIONS if n.startswith("multistep")])
def test_multistep_section_follows_from_its_json(name):
    """The curves' table follows from the JSON, and then the description of the paper's findings on its medians or,
    for a section written with --seed-rows, the verdicts of the registered rules on the seed rows it names."""
    from analyses.studies.multistep.measure import registered_lines, table_lines

    data = json.loads((STUDIES / f"{name}.json").read_text())
    curves = data["curves"]
    steps = len(next(iter(curves.values()))[0]["reembedded"]) - 1
    expected = (registered_lines(curves, steps, read_csv(STUDIES / data["seed_rows"])) if "seed_rows" in data
                else table_lines(curves, steps))
    _assert_lines_in(expected, SECTIONS[name], name)
    assert S.figure_line(name) in SECTIONS[name] and name in figures.available()


def test_generalisation_section_follows_from_its_csv():
    """The section and its CSV exist together (neither before the runs), and the section follows from the CSV."""
    from analyses.studies.main_seeds.generalisation import section_lines

    table = STUDIES / "generalisation.csv"
    assert ("generalisation" in SECTIONS) == table.exists(), "a generalisation section without its CSV, or the reverse"
    if not table.exists():
        return
    expected = section_lines(read_csv(table), "")
    _assert_lines_in([line for line in expected if line.startswith("|")], SECTIONS["generalisation"], "generalisation")


def test_variants_section_follows_from_its_csv():
    from analyses.studies.variants.measure import markdown

    rows = read_csv(RESULTS / "variants.csv")
    table = markdown(rows, "", "").split("Mean log inlier objective", 1)[1].splitlines()[2:]
    _assert_lines_in(table, SECTIONS["variants"], "variants")
    assert S.figure_line("variants") in SECTIONS["variants"]


def test_explain_section_is_what_the_generator_writes_from_the_committed_json(tmp_path):
    from analyses.studies.explain.measure import FAILURES, SECTION_COMMAND, results_section, write_results_md

    data = json.loads((RESULTS / "explain.json").read_text())
    failures = json.loads(FAILURES.read_text()) if FAILURES.exists() else None
    expected = results_section(data, failures)
    assert SECTIONS["explain"] == expected, f"the explain section of RESULTS.md is stale: {SECTION_COMMAND}"
    assert f"Command: `{data['command']}`" in expected
    if failures:  # every failure case's verdict is in the table
        assert "### 5. Failure cases" in expected
    # the writer puts exactly this text between the markers and leaves the rest of the file alone
    results_md = tmp_path / "RESULTS.md"
    results_md.write_text("# head\n\n<!-- study:explain -->\nold\n<!-- /study:explain -->\n\ntail\n")
    write_results_md(RESULTS / "explain.json", FAILURES, results_md)
    text = results_md.read_text()
    assert text.startswith("# head\n\n<!-- study:explain -->\n") and text.endswith("<!-- /study:explain -->\n\ntail\n")
    assert readme.study_sections(text)["explain"] == expected


def test_inference_embedding_section_follows_from_the_benchmark_json(tmp_path):
    from analyses.studies.inference_embedding.measure import write_embedding_section

    data = json.loads((RESULTS / "bench" / "inference_embeddings.json").read_text())
    sizes = json.loads(re.search(r"(\{.*\})", data["title"]).group(1))
    write_embedding_section(data["rows"], data["header"], sizes, 3, tmp_path / "R.md")
    table = [line for line in (tmp_path / "R.md").read_text().splitlines() if line.startswith("|")]
    assert len(table) == 2 + len(data["rows"])
    _assert_lines_in(table, SECTIONS["inference_embedding"], "inference_embedding")
    if "(`table1." in SECTIONS["inference_embedding"]:  # written with the registered verdicts of study table1
        write_embedding_section(data["rows"], data["header"], sizes, 3, tmp_path / "V.md", data)
        verdicts = [line for line in (tmp_path / "V.md").read_text().splitlines() if "(`table1." in line]
        _assert_lines_in(verdicts, SECTIONS["inference_embedding"], "inference_embedding verdicts")


def test_benchmark_json_prints_back_the_quoted_table():
    from analyses._timing import printed

    data = json.loads((RESULTS / "bench" / "seeds.json").read_text())
    lines = printed(data).splitlines()
    assert lines[0] == data["title"] and len(lines) == 3 + len(data["rows"])
    widths = [len(dashes) for dashes in lines[2].split("  ")]  # right-aligned columns, two spaces apart
    assert lines[1] == "  ".join(cell.rjust(w) for cell, w in zip(data["header"], widths))


# ----- results are data --------------------------------------------------------------------------------------------
def _kept_results() -> list[Path]:
    """Files under analyses/results/ that git keeps (the .gitignore rules: figures/, *.html, plotly.min.js, locks)."""
    return [path for path in RESULTS.rglob("*") if path.is_file() and "figures" not in path.relative_to(RESULTS).parts
            and path.suffix != ".html" and path.name != "plotly.min.js"
            and not (path.name.startswith(".") and path.suffix == ".lock")]  # a running study's lock


def test_committed_results_are_small_csv_and_json_without_plotly():
    ignored = (ROOT / ".gitignore").read_text().splitlines()
    for rule in ("analyses/results/figures/", "analyses/results/**/*.html", "analyses/results/**/plotly.min.js"):
        assert rule in ignored
    kept = _kept_results()
    assert kept and {path.suffix for path in kept} <= {".csv", ".json", ".jsonl"}
    # the studies' training curves (about 12 kB per run as columns, ~200 runs at the papers' budget) are most of it;
    # the per-task values that the hybrid and any-k comparisons are recomputed from add about 0.8 MB
    assert sum(path.stat().st_size for path in kept) < 6_500_000
    for path in kept:
        if path.name.endswith("_histories.jsonl"):
            assert all(isinstance(json.loads(line)["history"], dict) for line in path.read_text().splitlines()), path
    for path in kept:
        assert "plotly" not in path.read_text().lower(), path


def test_every_figure_is_drawn_from_the_committed_data(tmp_path):
    names = list(figures.available())
    expected = {"evaluation-main-onehot", "evaluation-main-binary", "evaluation-main-none", "variants", "multistep",
                *_study_names()}
    assert expected <= set(names)
    written = figures.main(["--out", str(tmp_path), "--only", "lr", "variants"])
    assert [p.name for p in written] == ["lr.html", "variants.html"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lr.html", "plotly.min.js", "variants.html"]
    page = (tmp_path / "lr.html").read_text()
    assert 'src="plotly.min.js"' in page and len(page) < 200_000  # plotly.js is loaded, not embedded
    lr = figures.study_figure(STUDIES, "lr")
    medians = {trace.name: trace.y for trace in lr.data if trace.name and trace.xaxis == "x"}
    stored = json.loads(S.training_path(STUDIES, "lr").read_text())["curves"]
    assert {label: list(curve["median"]) for label, curve in stored.items()} == {k: list(v) for k, v in medians.items()}


def _readings() -> dict[str, str]:
    """The "Reading" paragraph that follows a study section of RESULTS.md (up to the next section)."""
    from analyses.framework.reading import readings_in

    return readings_in((ROOT / "analyses" / "RESULTS.md").read_text())


def test_every_paper_budget_section_is_followed_by_a_reading():
    """Each study section at the papers' budget says in words what its table means."""
    unread = [name for name, section in SECTIONS.items() if readme.at_paper_budget(section) and name not in _readings()]
    assert len([name for name in SECTIONS if readme.at_paper_budget(SECTIONS[name])]) >= 9
    assert not unread, f"study sections at the papers' budget without a Reading paragraph: {unread}"


def test_every_reading_is_what_the_generator_writes_from_the_committed_files():
    """Each reading is rendered from the committed rows by its study folder's ``reading.py`` (figures looked up by
    key), and RESULTS.md holds no reading they do not render."""
    from analyses.framework.reading import readings, stale

    text = (ROOT / "analyses" / "RESULTS.md").read_text()
    assert set(_readings()) <= set(readings()), f"readings not generated: {set(_readings()) - set(readings())}"
    assert stale(text) == [], "stale readings: python -m analyses render"


GRID_VALUES = re.compile(r"\b(tau|gamma|beta|lr)\s*(=|≤|<|>|≥)\s*\d+(\.\d+)?|0\.95-quantile")


def test_no_reading_quotes_a_figure_typed_by_hand():
    """With figure marking on, every decimal number of a rendered reading is inside a mark: it was formatted from a
    looked-up value, not written in the text (grid values such as tau = 0.1 are names of grid points)."""
    from analyses.framework import reading

    reading.marked(True)
    try:
        texts = {name: write() for name, write in reading.readings().items()}
    finally:
        reading.marked(False)
    assert len(texts) >= 18, sorted(texts)  # every study folder's reading.py was found (the 18 readings)
    open_mark, close_mark = reading.MARKS
    for name, text in texts.items():
        unmarked = GRID_VALUES.sub("", re.sub(f"{open_mark}[^{close_mark}]*{close_mark}", "", text))
        typed = re.findall(r"\d+\.\d+", unmarked)
        assert not typed, f"reading {name} quotes {typed} without looking them up"


@pytest.mark.parametrize("edit", ["swap", "invent"])
def test_a_swapped_or_invented_figure_in_a_reading_is_caught(edit):
    """Swapping two quoted figures of a reading, or adding one, makes the reading stale."""
    from analyses.framework.reading import render, stale

    text = (ROOT / "analyses" / "RESULTS.md").read_text()
    reading = render("embedding_d4_k6")
    onehot, binary = "one-hot 0.916", "binary 0.966"
    assert onehot in reading and binary in reading  # the figures the edit touches are quoted
    if edit == "swap":
        edited = reading.replace(onehot, "one-hot ###").replace(binary, "binary 0.916").replace("###", "0.966")
    else:
        edited = reading.replace(onehot, "one-hot 0.91 (0.916")
    assert edited != reading
    assert stale(text.replace(reading, edited)) == ["embedding_d4_k6"]


def test_result_files_and_documents_are_written_atomically():
    """The analyses write RESULTS.md, README.md and their result files only through interp._io's temporary-and-rename
    writer: an interrupted run leaves the previous file, never half of one (the one exception opens /proc)."""
    plain = [f"{path.relative_to(ROOT)}:{number}" for path in sorted((ROOT / "analyses").rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\.write_text\(|open\([^)]*['\"]w['\"]", line) and "/proc/" not in line]
    assert not plain, plain


def test_both_n_table_pairs_each_claim_with_its_n512_twin(tmp_path):
    """The README's table of claims registered at both n: a claim ``X.c`` and its twin ``X_n512.c`` make one row with
    the verdict at each n (the n read from each section's budget line); a claim without a twin, and a section at a
    shorter budget, make none; without any pair there is no table."""
    def section(name: str, steps: int, n: int, claims: list[tuple[str, str]]) -> str:
        table = "\n".join(f"| finding {cid.split('.')[-1]} (`{cid}`) | rule figure | control figure | **{verdict}** |"
                          for cid, verdict in claims)
        return (f"<!-- study:{name} -->\n## Study `{name}`\n\nCommand: `python -m analyses.studies --steps {steps}`  "
                f"\nBudget: d=4, n={n}, steps={steps}\n\n| paper's finding | measured (rule) | control | verdict |\n"
                f"|---|---|---|---|\n{table}\n<!-- /study:{name} -->\n")
    results = tmp_path / "RESULTS.md"
    base = section("stab", 10_000, 128, [("stab.a", "reproduced"), ("stab.b", "not reproduced"),
                                         ("stab.c", "reproduced")])
    results.write_text(
        base + section("stab_n512", 10_000, 512, [("stab_n512.a", "undecided at this budget"),
                                                  ("stab_n512.b", "not reproduced")])
        + section("old", 3_000, 128, [("old.a", "reproduced")])
        + section("old_n512", 10_000, 512, [("old_n512.a", "reproduced")]))
    assert readme.both_n_lines(results)[2:] == [
        "| finding a | `a` | reproduced (n = 128) | undecided at this budget (n = 512) |",
        "| finding b | `b` | not reproduced (n = 128) | not reproduced (n = 512) |"]
    results.write_text(base)
    assert readme.both_n_lines(results) == []


def test_stability_n512_reading_names_exactly_the_seeds_whose_curves_jump():
    """The n = 512 stability reading describes exactly the clean seeds whose logged relative objective rose more than
    25% above its lowest value before, each with the figures recomputed here from the raw columns of the committed
    curves (float32 columns widened with numpy): the lowest value, the value and step of the largest rise, the rise
    in percent and the final value."""
    import numpy

    from analyses.framework.reading import render

    status = {row["name"]: row["status"] for row in read_csv(STUDIES / "stability_d32_k25_n512.csv")}
    expected = []
    for line in (STUDIES / "stability_d32_k25_n512_histories.jsonl").read_text().splitlines():
        entry = json.loads(line)
        values = entry["history"]["relative_objective"]
        if "relative_objective" in entry.get("float32", ()):
            values = [float(numpy.float32(value)) for value in values]
        rises = [(value / min(values[:i]) - 1, i) for i, value in enumerate(values) if i > 0]
        rise, at = max(rises, key=lambda pair: (pair[0], -pair[1]))  # the first of equal rises
        if status[entry["name"]] == "ok" and rise > 0.25:
            embedding, seed = re.fullmatch(r"embedding=(\w+)_seed=(\d+)", entry["name"]).groups()
            expected.append(f"{embedding} seed {seed}: from {min(values[:at]):.3f}, its best so far, to "
                            f"{values[at]:.3f} at step {entry['history']['step'][at]:,} (+{100 * rise:.0f}%), "
                            f"{values[-1]:.3f} at the end")
    reading = " ".join(render("stability_d32_k25_n512").split())  # unwrapped
    assert len(re.findall(r"(?:onehot|binary) seed \d+: from", reading)) == len(expected)
    for fragment in expected:
        assert fragment in reading
    assert expected, "the committed curves hold a jump (one-hot seed 149896109 rises from 1.750 to 15.114)"


def test_stability_readings_state_the_verdicts_once_ten_seeds_are_in(tmp_path, monkeypatch):
    """With 10 seeds of each embedding (the committed rows, with copies of them under new seeds while there are fewer
    than 10, the last one-hot row marked as a diverged run), both stability readings switch from "undecided until
    then" to the verdicts, computed by the rules: binary stable (no binary seed diverged) and one-hot unstable in some
    seeds (the diverged row)."""
    import csv
    import io

    from analyses.framework import reading
    from analyses.studies.stability_d32_k25 import reading as at_128_reading
    from analyses.studies.stability_d32_k25_n512 import reading as at_512_reading

    name = "stability_d32_k25_n512"
    for path in STUDIES.glob("stability_d32_k25*"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    rows = read_csv(STUDIES / f"{name}.csv")
    curves = {json.loads(line)["name"]: json.loads(line)
              for line in (STUDIES / f"{name}_histories.jsonl").read_text().splitlines()}
    added, lines = [], []
    for copy in range(1, 11):
        for embedding in ("onehot", "binary"):
            committed = [row for row in rows if row["label"] == f"embedding={embedding}"]
            if len(committed) + sum(row["label"] == f"embedding={embedding}" for row in added) >= 10:
                continue
            source = committed[copy % len(committed)]
            seed = int(source["seed"]) + copy
            config = {**json.loads(source["config"]), "seed": seed}
            row = {**source, "seed": str(seed), "name": f"embedding={embedding}_seed={seed}",
                   "config": json.dumps(config, sort_keys=True)}
            added.append(row)
            lines.append(json.dumps({**curves[source["name"]], "name": row["name"], "config": row["config"]}))
    table = rows + added
    last_onehot = max(index for index, row in enumerate(table) if row["label"] == "embedding=onehot")
    table[last_onehot] = {**table[last_onehot], "status": "diverged"}
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(table)
    (tmp_path / f"{name}.csv").write_text(buffer.getvalue())
    with open(tmp_path / f"{name}_histories.jsonl", "a") as handle:
        handle.write("\n".join(lines) + "\n")
    training = json.loads((tmp_path / f"{name}_training.json").read_text())  # the rows a section scores
    training["rows"] += [[row["name"], int(row["steps"])] for row in added]
    (tmp_path / f"{name}_training.json").write_text(json.dumps(training))
    monkeypatch.setattr(reading, "STUDIES", tmp_path)
    monkeypatch.setattr(reading, "study", lambda study_name: reading.Study(study_name, tmp_path))

    at_512, at_128 = at_512_reading.reading(), at_128_reading.reading()
    assert "onehot: 10 of 10 seeds, 1 numerically unstable" in at_512 and "binary: 10 of 10 seeds, 0" in at_512
    assert "Binary trains stably: reproduced (at n = 128 reproduced)" in at_512
    assert "one-hot is unstable in some seeds: reproduced (at n = 128 not reproduced)" in at_512
    assert "undecided until then" not in at_512
    assert "the one-hot half is reproduced" in at_128


def test_learning_reading_states_the_generalisation_verdicts_of_the_seeds_section(tmp_path):
    """The reading under the one-checkpoint learning table gives the registered verdicts of the ``generalisation``
    section (over the checkpoints its budget line names); without that section it says nothing is decided."""
    results = tmp_path / "RESULTS.md"
    results.write_text(
        "<!-- study:generalisation -->\n## Study `generalisation`\n\nBudget: 320 unseen tasks; checkpoints a.st, b.st, "
        "c.st\n\n| paper's finding | measured (rule) | control | verdict |\n|---|---|---|---|\n"
        "| Length (`generalisation.length`) | figure | control | **reproduced** |\n"
        "| Double (`generalisation.double`) | figure | control | **not reproduced** |\n"
        "<!-- /study:generalisation -->\n")
    assert readme._generalisation_verdicts(results) == (
        "The table gives one checkpoint per model; over 3 one-hot seeds the registered rules decide length and shift "
        "generalisation (analyses/RESULTS.md, study `generalisation`): `generalisation.length` reproduced; "
        "`generalisation.double` not reproduced.")
    results.write_text("# nothing\n")
    assert readme._generalisation_verdicts(results).startswith("Whether length and shift generalisation hold")


def test_results_md_opens_with_its_whole_introduction_then_the_overview_heading():
    """The introduction is one paragraph ending with the machine; the generated overview follows under its own
    heading (README points to it), before the first study section."""
    text = (ROOT / "analyses" / "RESULTS.md").read_text()
    intro, overview = text.split("\n## Overview\n", 1)
    assert "(between `<!-- study:NAME -->` markers)" in intro and intro.rstrip().endswith("(CPU).")
    assert "<!-- generated:" not in intro
    assert overview.index("<!-- /generated:speed -->") < overview.index("<!-- study:")


def test_claim_counts_over_every_claim_and_over_independent_evidence(tmp_path):
    """A claim whose runs another study's claim reads counts only in the first total; an independent claim in both; a
    benchmark's claim (no dependence entry: it reads no training run) counts as independent and is named so."""
    def section(name: str, command: str, claims: list[tuple[str, str]]) -> str:
        table = "\n".join(f"| finding (`{cid}`) | rule figure | control figure | **{verdict}** |"
                          for cid, verdict in claims)
        return (f"<!-- study:{name} -->\n## Study `{name}`\n\nCommand: `{command}`  \nBudget: d=4\n\n"
                f"| paper's finding | measured (rule) | control | verdict |\n|---|---|---|---|\n{table}\n"
                f"<!-- /study:{name} -->\n")
    results, dependence = tmp_path / "RESULTS.md", tmp_path / "dependence.json"
    results.write_text(
        section("a", "python -m analyses.studies --steps 10000", [("a.x", "reproduced"), ("a.y", "not reproduced")])
        + section("b", "python -m analyses.studies --steps 10000", [("b.z", "undecided at this budget")])
        + section("inference_embedding", "python -m analyses.bench_inference", [("table1.t", "reproduced")]))
    dependence.write_text(json.dumps({"claims": {
        "a.x": {"study": "a", "runs": 5, "shares_runs_with": ["b.z"]},
        "a.y": {"study": "a", "runs": 5, "shares_runs_with": []},
        "b.z": {"study": "b", "runs": 5, "shares_runs_with": ["a.x"]}}}))
    every, independent = readme.claim_counts(results, dependence)
    assert readme.counts_text(every) == "4 claims: 2 reproduced, 1 not reproduced, 1 undecided"
    assert readme.counts_text(independent) == ("2 claims: 1 reproduced, 1 not reproduced, 0 undecided (1 of them read "
                                               "no training run, only a benchmark)")
