# autopar: the REST service (`autopar serve`) and the CLI, without torch (only the profiler's benchmark
# modules import it, and they run on the GPU nodes themselves) and without the test extras.
#
#   docker build -t autopar .
#   docker run -p 8000:8000 -v autopar-data:/data autopar                 # API + 1 worker, SQLite in /data
#   docker run --rm -v autopar-data:/data autopar token create --scope write
#   docker run -e AUTOPAR_DATABASE_URL=postgresql+psycopg://user:pw@db/autopar autopar worker   # scale out
#
# The builder turns the source tree into a wheel, so the image holds the installed package only (with
# the Alembic scripts of migrations/, which setup.py copies in as service/store/_alembic, and the launch
# targets' flag lists, which the wheel ships as package data).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY autopar ./autopar
COPY search ./search
COPY profiler ./profiler
COPY service ./service
COPY migrations ./migrations
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AUTOPAR_DATA_DIR=/data
COPY --from=build /wheels /wheels
# [postgres]: psycopg, for a shared PostgreSQL (AUTOPAR_DATABASE_URL); SQLite needs nothing more.
RUN pip install --no-cache-dir "$(ls /wheels/autopar-*.whl)[postgres]" \
    && rm -rf /wheels \
    && useradd --create-home --uid 10001 autopar \
    && mkdir -p /data && chown autopar:autopar /data
USER autopar
WORKDIR /home/autopar
# The SQLite database (autopar.db) lives here; mount a volume to keep it across containers.
VOLUME ["/data"]
EXPOSE 8000
# No curl in the slim image: Python's urllib asks /healthz (process alive; /readyz also checks the database).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
# `docker stop` sends SIGTERM and waits 10 s: serve's default --stop-timeout (8 s) stops the API and the
# workers within it; a search cut short goes back to the queue.
ENTRYPOINT ["autopar"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
