"""Training: the trainer, seed-batched training, sweeps over configs, and the smoothed k-means losses."""
