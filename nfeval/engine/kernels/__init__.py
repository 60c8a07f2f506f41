"""Hardware switches applied after a model is built or at process entry: the oneDNN CPU linear kernel and
denormal flushing.
"""
