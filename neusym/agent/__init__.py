"""The NeuSym-RAG agent: LLM backends, the five actions and the ReAct loop.

Entry point: :func:`neusym.agent.react.answer_question`.
"""

from neusym.agent.actions import ACTION_TYPES, Action, Environment, Observation, action_json_schema
from neusym.agent.llm import LLM, LLMError, LLMReply, LocalLlamaLLM, OpenAICompatibleLLM, make_llm
from neusym.agent.react import AgentResult, Step, answer_question

__all__ = [
    "ACTION_TYPES",
    "Action",
    "AgentResult",
    "Environment",
    "LLM",
    "LLMError",
    "LLMReply",
    "LocalLlamaLLM",
    "Observation",
    "OpenAICompatibleLLM",
    "Step",
    "action_json_schema",
    "answer_question",
    "make_llm",
]
