"""The learner's machinery: log-probs, micro-batches, precision, checkpoints, the distributed helpers,
the run directory and the warm start. The recipe (`mmrlvr.recipe`) drives it; no method is named here."""
