"""neusym: NeuSym-RAG corpus pipeline and query layer."""
