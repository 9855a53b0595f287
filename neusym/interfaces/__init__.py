"""Interfaces (top layer): the ``neusym`` command (:mod:`.cli`), the HTTP service and web page
(:mod:`.service`), and the local Airflow cluster (:mod:`.cluster`). Nothing below imports them.
"""
