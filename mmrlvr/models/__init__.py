"""Model loading: any AutoModelForImageTextToText, the embedded tiny default (`tiny`), tiny random
models of each supported family (`tiny:<model_type>`, `families/`), and the per-family details
the RL code needs (`adapters`)."""
