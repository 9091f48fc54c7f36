"""Training of the shipped default model (apart from the inference path): corpus, holes, batches, loop, export."""
