"""Chat LLM backends shared by the agent, enrichment, rerank and the judge: an OpenAI-compatible
endpoint or the offline GGUF (:mod:`neusym.llm.chat`), and the offline model's files
(:mod:`neusym.llm.model_files`).
"""
