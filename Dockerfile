# The Autoloop server image: 'autoloop serve' on port 8080, state in /var/lib/autoloop.
# docs/deploy.md tells how to build and run it (with compose.yaml), and what it lacks:
# the agents' own programs (Claude Code, Codex) are not in it.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kernel kernel
COPY pipeline pipeline
COPY plugins plugins
COPY ghapp ghapp
COPY fakegithub fakegithub
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --system --gid 10001 autoloop \
    && useradd --system --uid 10001 --gid autoloop --home-dir /var/lib/autoloop \
       --create-home --shell /usr/sbin/nologin autoloop
COPY --from=build /wheels /wheels
# the wheels built above: the versions resolved when the image was built, and no index
RUN pip install --no-cache-dir --no-index /wheels/*.whl && rm -rf /wheels
ENV AUTOLOOP_HOME=/var/lib/autoloop \
    PYTHONUNBUFFERED=1
USER 10001:10001
WORKDIR /var/lib/autoloop
VOLUME ["/var/lib/autoloop"]
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["autoloop"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
