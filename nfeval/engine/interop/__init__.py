"""Hugging Face interop: the export (GPT-2 layout or remote code over engine/model) and the GPT-2 name map."""
