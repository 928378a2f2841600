"""Multi-step inference: re-embedding vs naive stacking vs Lloyd over 20 steps (paper 2 Fig. 6)."""

import json

from analyses.framework.study import MeasuredStudy

# a section of checkpoints that are not committed (3,000-step seeds of an earlier budget): kept with its own command
EARLIER = ("python -m analyses.multistep --checkpoints 'runs/studies/checkpoints/embedding_d32_k10/*.safetensors' "
           "--name multistep_3000steps --tasks 320 --steps 20 --threads 2 --results-md")


def section_of(name: str, command: str | None = None) -> str:
    """The section of ``<name>.json`` (its curves and checkpoints; 320 tasks, n = 512, as its command ran)."""
    from pathlib import Path

    from analyses import _studies as S
    from analyses.studies.multistep.measure import table_lines

    data = json.loads((S.HERE / "results" / "studies" / f"{name}.json").read_text())
    steps = len(next(iter(data["curves"].values()))[0]["reembedded"]) - 1
    command = command or S.command_line()
    lines = [f"## Study `{name}`: re-embedding vs naive stacking (`{S.program(command)}`)", "",
             f"Command: `{command}`  ",
             f"Budget: 320 unseen tasks, n=512, {steps} steps, random init; checkpoints "
             f"{', '.join(Path(p).name for p in data['checkpoints'])}  ",
             "Paper: paper 2 Fig. 6 (T = 20; trained n = 512, d = 32, k = 10, tau = 0.1; 10 seeds)  ",
             S.figure_line(name), "", *table_lines(data["curves"], steps)]
    return "\n".join(lines) + "\n"


STUDY = MeasuredStudy("Re-embedding vs naive stacking", "analyses.studies.multistep.measure",
                      {"quick": ("--tasks", "16", "--n", "128", "--out", "runs/analyses/quick"),
                       "paper": ("--tasks", "320", "--steps", "20", "--threads", "2", "--results-md")},
                      {"multistep": lambda: section_of("multistep"),
                       "multistep_3000steps": lambda: section_of("multistep_3000steps", EARLIER)},
                      writes=("studies/multistep.json",))
