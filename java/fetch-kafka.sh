#!/usr/bin/env bash
# Fetch the pinned Apache Kafka release (broker, tools, Java client) from Maven Central into a
# cache outside the repository and compile the test driver against it. Idempotent: a stamp
# records what the cache was built from, and a complete cache is left alone.
#
#   MOLDAU_KAFKA_HOME   the cache directory (default: ~/.cache/moldau/kafka-<version>)
#
# Prints the cache directory as its last line.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml" | head -1)"
[ -n "$version" ] || { echo "kafka-deps: no <kafka.version> in $here/pom.xml" >&2; exit 1; }
cache="${MOLDAU_KAFKA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/moldau/kafka-$version}"
mkdir -p "$cache"

# Two test runs may ask at once: one builds, the other waits for it.
exec 9>"$cache/.lock"
flock 9

sources=$(cd "$here" && find src -name '*.java' | LC_ALL=C sort)
stamp="$( (cat "$here/pom.xml" "$here/fetch-kafka.sh"; for f in $sources; do echo "$f"; cat "$here/$f"; done) \
  | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$cache/.complete" 2>/dev/null || true)" = "$stamp" ] \
    && [ -f "$cache/lib/kafka_2.13-$version.jar" ]; then
  echo "kafka-deps: Apache Kafka $version is up to date in $cache"
  echo "$cache"
  exit 0
fi
rm -f "$cache/.complete"

for tool in mvn javac java; do
  command -v "$tool" >/dev/null || { echo "kafka-deps: $tool is not installed" >&2; exit 1; }
done

echo "kafka-deps: fetching Apache Kafka $version (broker, tools, client) from Maven Central"
start=$SECONDS
rm -rf "$cache/lib.new"
# Maven's own output goes to a log, shown only when it fails.
if ! mvn -B -f "$here/pom.xml" -Doracle.build.dir="$cache/build" \
    dependency:copy-dependencies -DoutputDirectory="$cache/lib.new" >"$cache/mvn.log" 2>&1; then
  tail -n 60 "$cache/mvn.log" >&2
  echo "kafka-deps: Maven failed; full log in $cache/mvn.log" >&2
  exit 1
fi
rm -rf "$cache/lib" && mv "$cache/lib.new" "$cache/lib"
echo "kafka-deps: $(ls "$cache/lib" | wc -l) jars in $cache/lib ($((SECONDS - start)) s)"

echo "kafka-deps: compiling the Java client driver"
rm -rf "$cache/classes.new" && mkdir -p "$cache/classes.new"
# shellcheck disable=SC2086 # one path per source file
(cd "$here" && javac -nowarn --release 17 -encoding UTF-8 -cp "$cache/lib/*" \
  -d "$cache/classes.new" $sources)
rm -rf "$cache/classes" && mv "$cache/classes.new" "$cache/classes"

echo "$stamp" > "$cache/.complete"
echo "kafka-deps: ready in $((SECONDS - start)) s"
echo "$cache"
