"""Training: the trainer (one run per seed), sweeps over configs, and the smoothed k-means losses."""
