"""The surrogate fit recovers known algorithms: on the exact Lloyd construction the Lloyd surrogate explains the
update exactly; on the soft k-means construction the soft surrogate finds its temperature."""

import pytest

from interp.instruments.surrogate import fit_surrogates
from interp.model.constructions import lloyd_transformer, soft_kmeans_transformer
from interp.tasks import TaskConfig

TASKS = TaskConfig(n=120, d=3, k=4)


def by_name(fits):
    return {fit.name: fit for fit in fits}


def test_lloyd_construction_is_explained_by_lloyd():
    fits = by_name(fit_surrogates(lloyd_transformer(3, 4, 1), TASKS, n_fit=24, n_test=24, steps=5))
    assert fits["lloyd"].r2_update == pytest.approx(1.0, abs=1e-9)
    assert fits["relaxed"].coefficients["lam"] == pytest.approx(1.0, abs=1e-9)
    assert fits["full"].r2_update > 0.999


def test_soft_kmeans_construction_recovers_its_temperature():
    temperature = 0.1  # on the surrogate's grid of temperatures
    model = soft_kmeans_transformer(3, 4, 1, beta=1 / temperature)
    fits = by_name(fit_surrogates(model, TASKS, n_fit=24, n_test=24, steps=5))
    assert fits["soft"].temperature == pytest.approx(temperature, rel=1e-6)
    assert fits["soft"].r2_update == pytest.approx(1.0, abs=1e-9)
    assert fits["soft"].r2_update > fits["lloyd"].r2_update
