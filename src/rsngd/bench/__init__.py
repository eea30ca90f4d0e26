"""``rsngd bench``: RS-SNGD against AdamW, GaLore, Fira, APOLLO and Adam-mini on the same runs."""
