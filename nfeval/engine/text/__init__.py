"""Text to token ids: tokenizers (nfeval's BPE, fairseq's GPT-2 BPE), the token datasets and the embedded
corpus.
"""
