# autopar: the CLI (and, from a later issue, the REST service). torch is not needed here:
# only the profiler's benchmark modules import it, and they run on the GPU nodes themselves.
FROM python:3.11-slim

WORKDIR /app
COPY pyproject.toml README.md ./
COPY search ./search
COPY profiler ./profiler
COPY service ./service
RUN pip install --no-cache-dir . && useradd --create-home autopar
USER autopar

ENTRYPOINT ["autopar"]
CMD ["presets"]
