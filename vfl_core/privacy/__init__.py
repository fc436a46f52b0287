"""Label-leak defences (opt-in) and their privacy accounting."""
