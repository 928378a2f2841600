"""``python -m analyses.paper_budget --dry-run`` says of each command what it would train now, from the committed
rows: nothing for a study whose rows are all written, the missing seed otherwise."""

from analyses import paper_budget


def test_plan_of_a_finished_command_and_of_one_with_a_seed_not_yet_trained():
    finished = next(command for study, command in paper_budget.COMMANDS if study == "embedding_n512")
    assert paper_budget.plan(finished) == ["embedding_d4_k16_n512.csv: nothing to train (every seed's row is written)"]
    seeds = finished.index("--seeds")
    another_seed = [*finished[:seeds + 1], "7", *finished[seeds + 2:]]
    assert paper_budget.plan(another_seed) == ["embedding_d4_k16_n512.csv: 1 seed run to train (embedding=onehot: 7)"]


def test_dry_run_prints_each_command_with_its_plan(capsys):
    assert paper_budget.main(["--dry-run", "--only", "embedding_n512"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * 15  # 3 embeddings x 5 seeds, one command each
    assert all(line.startswith("embedding_n512: python -m analyses.ablate_embedding --name embedding_n512")
               for line in lines[::2])
    assert set(lines[1::2]) == {"    embedding_d4_k16_n512.csv: nothing to train (every seed's row is written)"}


def test_the_main_seeds_are_queued_one_per_embedding_and_seed_and_scored_in_one_section_command():
    queued = [command for study, command in paper_budget.COMMANDS if study == "multistep"]
    assert queued == [["analyses.main_seeds", "--embeddings", embedding, "--seeds", str(seed)]
                      for embedding in ("onehot", "binary", "none") for seed in paper_budget.SEEDS]
    sections = [command for study, command in paper_budget.section_commands(True) if study == "multistep"]
    assert sections == [["analyses.main_seeds", "--seeds", *map(str, paper_budget.SEEDS)]]
    assert paper_budget.plan(["analyses.main_seeds", "--embeddings", "onehot", "--seeds", "7"]) == [
        "main seeds: 1 seed run to train and score (onehot 7)"]


def test_the_parts_of_a_split_study_train_rows_only_and_its_section_command_writes_the_summary(monkeypatch):
    """A part (one seed, one grid slice) would rewrite the study's committed ``<table>_training.json`` from its own
    rows; trained with ``--train-only`` it writes rows and curves only."""
    queued = {}

    class Recorded:
        def __init__(self, queue, count, log):
            queued["queue"] = queue

        def run(self):
            return []

    monkeypatch.setattr(paper_budget, "Lanes", Recorded)

    def commands(*argv):
        assert paper_budget.main(list(argv)) == 0
        return queued["queue"]

    training = commands("--only", "embedding_n512", "lr", "embedding", "multistep")
    flagged = {study: {"--train-only" in command for s, command in training if s == study}
               for study in ("embedding_n512", "lr", "embedding", "multistep")}
    assert flagged == {"embedding_n512": {True}, "lr": {True}, "embedding": {False}, "multistep": {False}}
    for argv in (["--score-only"], ["--results-md", "--score-only"]):  # scoring: each study's whole grid, once
        scored = commands(*argv, "--only", "embedding_n512", "lr")
        assert [(study, command[:-len(argv)]) for study, command in scored] == [
            ("embedding_n512", paper_budget.SECTION_COMMANDS["embedding_n512"]),
            ("lr", paper_budget.SECTION_COMMANDS["lr"])]
    assert [command for _, command in commands("--results-md", "--only", "lr")] == [
        [*paper_budget.SECTION_COMMANDS["lr"], "--results-md"]]


def test_dry_run_plans_a_command_that_trains_rows_only(capsys):
    """``--plan`` excludes ``--train-only``: the dry run plans the command without it."""
    assert paper_budget.main(["--dry-run", "--only", "lr"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 * 2 and all(line.endswith(" --train-only") for line in lines[::2])
    assert all(line.startswith("    lr.csv: ") and "to train" in line for line in lines[1::2])
