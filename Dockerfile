# sandbox-supervisor as a sandbox container's entrypoint (PID 1).
#
#   docker run -e SUPERVISOR_TOKEN=... -p 3000:3000 IMAGE                 # the daemon alone
#   docker run -e SUPERVISOR_TOKEN=... IMAGE -- python3 -m http.server     # with a main command
#
# Controllers connect on the Unix socket inside the container, or from outside on the HTTP
# front at port 3000 (WebSocket /rpc, browser terminals /terminals/ID, health /healthz and
# /readyz) or raw TCP port 7000. A token is required off loopback: the daemon refuses to
# start without one. /healthz needs no token, so a platform's health check needs none.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SUPERVISOR_LISTEN="unix:/run/sandbox-supervisor.sock http:0.0.0.0:3000 tcp:0.0.0.0:7000"

WORKDIR /opt/sandbox-supervisor
COPY pyproject.toml README.md constraints.txt ./
COPY protocol ./protocol
COPY supervisor ./supervisor
RUN pip install --no-cache-dir -c constraints.txt . \
    && mkdir -p /workspace

WORKDIR /workspace
EXPOSE 3000 7000
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["supervisor", "ping", "--connect", "unix:/run/sandbox-supervisor.sock"]
ENTRYPOINT ["supervisor", "serve"]
