"""GitHub's JSON shapes, one function per object, for REST answers and webhook payloads.

- ``core``: ``Json``, ``node_id``, ``user``, ``app``, ``repository``, ``label``,
  ``issue``, ``comment``
- ``pulls``: ``pull_request``, ``simple_pull_request``, ``pull_minimal``, ``review``
- ``checks``: ``commit``, ``push_commit``, ``check_suite``, ``check_run``,
  ``commit_status``, ``combined_status``, ``deployment``, ``deployment_status``, ``release``

Pure reads of the state: nothing here changes it. Nothing is imported here.
"""
