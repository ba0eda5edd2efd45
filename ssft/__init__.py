"""ssft: semi-Siamese fine-tuning of neural rankers on the Hugging Face stack."""
__version__ = "0.1.0"
