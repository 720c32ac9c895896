"""Reading part files so that one damaged file costs a warning naming it, never the whole store.

A part is damaged when its footer cannot be read (a zero-byte or truncated file) or a page fails to
decode or to match its checksum (flipped bytes; every part is written with page checksums). Readers
try the fast path (one dataset scan over all parts); only when that fails do they read part by part
to find, name and skip the damaged ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from runner.fs.root import Root
from runner.store import part_names
from runner.store.columns import foreign_columns
from runner.store.files import read_tail

if TYPE_CHECKING:
    import pyarrow.dataset as ds


@cache
def parquet_format() -> ds.ParquetFileFormat:
    """The format every dataset scan reads with: page checksums verified, so flipped bytes become an error
    naming the file, not wrong numbers. Made at the first read: pyarrow.dataset imports pandas (0.2 s),
    which a command that only writes, as a study on a new store, need not wait for."""
    import pyarrow.dataset as ds

    return ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
    )


VERIFY_ROWS = 8_192  # decoded at a time: a batch of long strings (params_json) is MBs, and malloc keeps what it held


class ReadAgain(Exception):
    """A streamed read met a damaged part midway, after using some of its rows: the part is marked
    damaged, and the reader starts over without it (`ResultStore.retrying`)."""


class DamagedPart(ValueError):
    """A part whose bytes are not what its name records."""


class ForeignPart(ValueError):
    """A part whose columns are not those of the folder it lies in (a file put there by hand, a type
    changed by damage the footer checksum could not see: a part named before checksums)."""


class QueryError(ValueError):
    """A read asked for something the parts' columns cannot answer (a filter on a column they lack, a
    value of another type than the column's): the caller's mistake, which says nothing of the files."""


def check_query(schema: pa.Schema, columns: list[str] | None, filter: ds.Expression | None) -> None:
    """Raise QueryError when `columns` or `filter` do not apply to `schema`, before any file is read:
    an error there would otherwise look like a damaged part. Evaluated on an empty table of `schema`,
    which dispatches the filter's kernels on the columns' types."""
    table = schema.empty_table()
    try:
        if filter is not None:
            table = table.filter(filter)
        if columns is not None:
            table.select(columns)
    except (pa.ArrowException, KeyError) as exc:
        what = f"filter {filter}" if filter is not None else f"columns {columns}"
        raise QueryError(f"cannot read with {what}: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None


class DamagedPartWarning(UserWarning):
    """A part file could not be read and was skipped (see `convgrid status`, `convgrid compact --repair`)."""


class PartReader:
    """Footers and tables of part files, remembering which parts are damaged. Parts are immutable and
    their names unique, so a footer read once stays valid for the life of the process."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self._schemas: dict[str, pa.Schema] = {}
        self._metadata: dict[str, pq.FileMetaData] = {}
        self.damaged: dict[str, str] = {}  # relative path -> the error that made it unreadable

    def mark_damaged(self, rel: str, error: BaseException) -> None:
        """Record `rel` as damaged, with a warning; FileNotFoundError instead where it is simply gone (a
        transaction published or replaced it after the caller listed it: the caller lists again). An
        object store reports a key gone mid-read as some other error (S3: "NOT_FOUND" in an OSError),
        which made a part moved by a concurrent commit read as damaged (seen in the issue-44 soak)."""
        if rel not in self.damaged and not isinstance(error, DamagedPart) and not self.root.exists(rel):
            raise FileNotFoundError(f"{self.root.abs(rel)} went while it was read: {error}") from error
        if rel not in self.damaged:
            self.damaged[rel] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            warnings.warn(
                f"convgrid: skipping damaged part {self.root.abs(rel)} ({self.damaged[rel]}); "
                "`convgrid compact --repair` moves it to quarantine",
                DamagedPartWarning,
                stacklevel=3,
            )

    def schema(self, rel: str) -> pa.Schema | None:
        """The part's schema from its footer, checked: against the size and footer checksum its name
        records (runner.store.part_names), and against the columns its folder's rows must have
        (runner.store.columns.foreign_columns). None (and a warning naming the file and the fix) when the part
        is damaged, foreign, or was found damaged before (a page of it failed after its footer was read)."""
        if rel in self.damaged:
            return None
        if rel in self._schemas:
            return self._schemas[rel]
        try:
            schema = self._checked_schema(rel)
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException, ValueError) as exc:  # UnicodeDecodeError of a flipped name, too
            self.mark_damaged(rel, exc)
            return None
        self._schemas[rel] = schema
        return schema

    def _checked_schema(self, rel: str) -> pa.Schema:
        path = self.root.abs(rel)
        expected = part_names.expected(rel)
        size = None
        if expected is not None:
            info = self.root.fs.get_file_info(path)
            if info.type == pafs.FileType.NotFound:  # published or replaced since it was listed
                raise FileNotFoundError(path)
            size = info.size
            if size != expected.size:
                raise DamagedPart(f"{size} bytes where its name records {expected.size}")
        tail = read_tail(self.root.fs, path, size)
        if expected is not None and part_names.footer_crc(tail) != expected.footer_crc:
            raise DamagedPart("its footer does not match the checksum its name records")
        metadata = pq.read_metadata(pa.BufferReader(tail))
        schema = metadata.schema.to_arrow_schema()
        problem = foreign_columns(rel, schema)
        if problem:
            raise ForeignPart(problem)
        self._metadata[rel] = metadata
        return schema

    def metadata(self, rel: str) -> pq.FileMetaData:
        """The footer of a readable part (`schema` first), read once."""
        metadata = self._metadata.get(rel)
        if metadata is None:  # a part this process wrote: its footer was not read
            tail = read_tail(self.root.fs, self.root.abs(rel))
            metadata = self._metadata[rel] = pq.read_metadata(pa.BufferReader(tail))
        return metadata

    def known(self, rel: str, schema: pa.Schema) -> None:
        """The schema of a part this process is writing (what its footer will say): the next flush
        need not read the footer back."""
        self._schemas[rel] = schema

    def readable(self, rels: Sequence[str]) -> list[str]:
        return [r for r in rels if self.schema(r) is not None]

    def unified_schema(self, rels: Sequence[str], base: pa.Schema | None = None) -> pa.Schema:
        """The union of the parts' columns, newest part first (its metadata, e.g. version, wins)."""
        schemas = [s for r in reversed(rels) if (s := self.schema(r)) is not None]
        if base is not None:
            schemas.insert(0, base)
        if not schemas:
            return pa.schema([])
        union = pa.unify_schemas(schemas, promote_options="permissive")
        # a column some parts lack reads as nulls from them, whatever the parts that have it declare (an
        # older layout's non-nullable curves batch_id beside parts written without it)
        partial = [i for i, f in enumerate(union) if not f.nullable and any(f.name not in s.names for s in schemas)]
        for i in partial:
            union = union.set(i, union.field(i).with_nullable(True))
        return union

    def read(
        self,
        rels: Sequence[str],
        schema: pa.Schema,
        columns: list[str] | None = None,
        filter: ds.Expression | None = None,
    ) -> pa.Table:
        """The rows of the readable parts among `rels`, cast to `schema`; damaged parts skipped. A query
        that does not apply to `schema` raises QueryError and marks nothing damaged."""
        check_query(schema, columns, filter)
        rels = self.readable(rels)
        if not rels:
            table = schema.empty_table()
            return table.select(columns) if columns is not None else table
        try:
            return self._scan(rels, schema, columns, filter)
        except FileNotFoundError:
            raise  # a transaction moved a part meanwhile: the caller lists again
        except (OSError, pa.ArrowException, ValueError):
            pass
        tables = []
        for rel in rels:  # slow path: find the part(s) that fail, name them, keep the rest
            try:
                tables.append(self._scan([rel], schema, columns, filter))
            except FileNotFoundError:
                raise
            except (OSError, pa.ArrowException, ValueError) as exc:  # the query applies (checked): the bytes fail
                self.mark_damaged(rel, exc)
        if not tables:
            table = schema.empty_table()
            return table.select(columns) if columns is not None else table
        return pa.concat_tables(tables)

    def verify(self, rel: str) -> bool:
        """Read every page of the part (checksums included); False (and recorded) when damaged."""
        if self.schema(rel) is None:
            return False
        try:
            part = pq.ParquetFile(
                self.root.fs.open_input_file(self.root.abs(rel)),
                page_checksum_verification=True,
                pre_buffer=False,
                buffer_size=1 << 20,  # the column chunk streamed through a 1 MB buffer, not read whole
            )
            # one column at a time, VERIFY_ROWS rows at a time: every page is decoded and checked, and
            # neither a part nor one column of a row group of a million rows stands in memory whole
            # (`status` verifies every part; a million runs' params_json alone decode to ~200 MB)
            for column in part.schema_arrow.names:
                for _ in part.iter_batches(batch_size=VERIFY_ROWS, columns=[column], use_threads=False):
                    pass
        except FileNotFoundError:
            raise
        except (OSError, pa.ArrowException, ValueError) as exc:
            self.mark_damaged(rel, exc)
            return False
        return True

    def _scan(
        self, rels: Sequence[str], schema: pa.Schema, columns: list[str] | None, filter: ds.Expression | None
    ) -> pa.Table:
        import pyarrow.dataset as ds

        paths = [self.root.abs(r) for r in rels]
        dataset = ds.dataset(paths, filesystem=self.root.fs, format=parquet_format(), schema=schema)
        return dataset.to_table(columns=columns, filter=filter)
