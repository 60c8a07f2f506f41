"""GLUE: data readers, metrics (scikit-learn) and the fine-tuning learning-rate sweep."""
