FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    ROOST_HOME=/data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY adapters ./adapters
COPY agent_core ./agent_core
COPY workspace ./workspace
RUN pip install --no-cache-dir . \
 && useradd --create-home --uid 10001 roost \
 && mkdir -p /data && chown roost:roost /data

USER roost
VOLUME ["/data"]
ENTRYPOINT ["roost"]
CMD ["run"]
