"""neusym: NeuSym-RAG corpus pipeline and query layer."""


def package_version() -> str:
    """The installed neusym distribution's version ("0.1.0"), or "unknown" when it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("neusym")
    except PackageNotFoundError:
        return "unknown"
