"""The inference plane: the hot path. It never imports the store, the control plane or batches."""
