"""task=retrieval: order embeddings for COCO image-caption retrieval."""
