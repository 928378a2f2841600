"""One-hot vs binary embedding: forward time and peak memory over k (paper 2 Table 1); with the other inference
benchmarks of its ``measure.py``."""

import json
import re

from analyses.framework.study import MeasuredStudy, section_written


def section() -> str:
    from analyses import _studies as S
    from analyses.studies.inference_embedding.measure import write_embedding_section

    data = json.loads((S.HERE / "results" / "bench" / "inference_embeddings.json").read_text())
    sizes = json.loads(re.search(r"(\{.*\})", data["title"]).group(1))
    return section_written("inference_embedding", lambda path: write_embedding_section(
        data["rows"], data["header"], sizes, 5, path, data))


STUDY = MeasuredStudy("Inference benchmarks (one-hot vs binary, Lloyd vs transformer, evaluation)",
                      "analyses.studies.inference_embedding.measure",
                      {"quick": ("--quick", "--json", "runs/analyses/quick"),
                       "paper": ("--embeddings-only", "--embedding-rounds", "5", "--results-md")},
                      {"inference_embedding": section}, writes=("bench/inference_embeddings.json",))
