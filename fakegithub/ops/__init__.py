"""The fake GitHub's writes: functions over the state that change it and emit the events.

- ``issues``: ``open_issue``, ``update_issue``, ``set_state``, ``add_labels``,
  ``remove_label``, ``add_assignees``, ``create_comment``, ``update_comment``
- ``pulls``: ``open_pull``, ``update_pull``, ``ready_for_review``, ``create_review``,
  ``update_branch``, ``merge`` (with GitHub's merge guards)
- ``git``: ``resolve``, ``move_branch``, ``push``, ``contents``, ``put_contents``
- ``checks``: check runs and suites, commit statuses, deployments, releases

Callers hold the state's lock. Routes and the scripted world both call these.
Nothing is imported here.
"""
