"""Model loading: any AutoModelForImageTextToText, plus the embedded tiny default."""
