"""One module per dashboard page."""
