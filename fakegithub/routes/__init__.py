"""The fake GitHub's routes: one module per area, each with a ``ROUTES`` table.

- ``app``: the App itself (JWT): the App, installations, installation tokens, deliveries
- ``issues``: issues, comments, labels, assignees
- ``pulls``: pull requests, reviews, update-branch, merge
- ``checks``: check runs, commit statuses, deployments, releases
- ``repos``: the repository, contents, commits, compare, branch deletion, protection,
  rulesets, collaborators
- ``users``: ``GET /user``, who a personal token acts as
- ``manifests``: the App manifest flow: the "create an App from a manifest" page, the
  code's conversion, and the install page
- ``graphql``: ``POST /graphql``, only the mutation that marks a draft ready for review
- ``control``: ``/_sandbox/`` control routes (loopback only); ``OPERATIONS``

The REST modules take their plumbing (``Ctx``, ``endpoint``, ``paginate``) from
:mod:`fakegithub.api`. Only :mod:`fakegithub.server` joins the tables into one app.
Nothing is imported here.
"""
