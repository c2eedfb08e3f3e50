"""Which functions an ELF shared library defines (.dynsym and .symtab), read without extra tools.

uprobes are only rendered for symbols present in the exact file a process mapped: a name that is
absent would make bpftrace fail to attach and stop the whole program. Only ELF64 little-endian
files are read (x86_64, aarch64); anything else, or a malformed file, raises ElfError. Reads are
bounded by the file size, so a hostile file cannot make us allocate without limit.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import NamedTuple

SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
SHN_UNDEF = 0
_MAX_SECTIONS = 4096
MAX_FILE_BYTES = 2 << 30  # libcuda is ~100 MiB; refuse absurd sizes instead of reading them


class Function(NamedTuple):
    """A defined function: its virtual address (st_value) and that address's file offset."""

    address: int
    offset: int | None  # None: not inside a PT_LOAD segment


class ElfError(Exception):
    """The file is not an ELF64 little-endian object we can read (message says why)."""


def defined_functions(path: str | Path) -> set[str]:
    """Names of functions (FUNC/IFUNC) the file defines in .dynsym and .symtab.

    Versioned names are returned without their version (`llabs`, not `llabs@@GLIBC_2.2.5`).
    """
    return set(function_addresses(path))


def function_addresses(path: str | Path) -> dict[str, Function]:
    """Defined functions (FUNC/IFUNC, .dynsym first, then .symtab) → address and file offset.

    Weak aliases (`ncclAllReduce` / `pncclAllReduce`) share one address: a uprobe on either
    fires for both, so a caller probing several names must probe each address once. Versioned
    names lose their version; the first definition of a name wins (.dynsym is read first).
    """
    try:  # O_NONBLOCK: a FIFO planted under a library's name must not hang us
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ElfError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ElfError(f"{path} is not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise ElfError(f"{path} is larger than {MAX_FILE_BYTES >> 20} MiB")
        data = fh.read(MAX_FILE_BYTES)
    if data[:4] != b"\x7fELF":
        raise ElfError(f"{path} is not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError(f"{path} is not ELF64 little-endian")
    try:
        return _functions(data)
    except (struct.error, IndexError, ValueError) as exc:
        raise ElfError(f"{path}: malformed ELF ({exc})") from None


def _functions(data: bytes) -> dict[str, Function]:
    vaddrs = _symbols(data)
    loads = _loads(data)
    out = {}
    for name, addr in vaddrs.items():
        bias = next((v - o for v, o, size in loads if v <= addr < v + size), None)
        out[name] = Function(addr, None if bias is None else addr - bias)
    return out


def _loads(data: bytes) -> list[tuple[int, int, int]]:
    """PT_LOAD segments as (p_vaddr, p_offset, p_memsz)."""
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    if phnum > _MAX_SECTIONS or (phnum and phentsize < 56):
        raise ValueError("bad program headers")
    out = []
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, _filesz, p_memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", data, phoff + i * phentsize
        )
        if p_type == 1:  # PT_LOAD
            out.append((p_vaddr, p_offset, p_memsz))
    return out


def _symbols(data: bytes) -> dict[str, int]:
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shoff == 0 or shnum == 0 or shnum > _MAX_SECTIONS or shentsize < 64:
        raise ValueError("no section headers")
    sections = []
    for i in range(shnum):
        _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize
        )
        sections.append((sh_type, offset, size, link, entsize))
    names: dict[str, int] = {}
    for sh_type, offset, size, link, entsize in sorted(sections, key=lambda s: s[0] != SHT_DYNSYM):
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or entsize < 24 or link >= len(sections):
            continue
        _t, str_off, str_size, _l, _e = sections[link]
        if offset + size > len(data) or str_off + str_size > len(data):
            raise ValueError("section beyond the end of the file")
        strtab = data[str_off : str_off + str_size]
        for sym in range(offset, offset + size - entsize + 1, entsize):
            st_name, st_info, _other, st_shndx, st_value = struct.unpack_from("<IBBHQ", data, sym)
            if st_shndx == SHN_UNDEF or (st_info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC):
                continue
            end = strtab.find(b"\0", st_name)
            if st_name and end > st_name:
                names.setdefault(strtab[st_name:end].decode("ascii", "replace").split("@", 1)[0], st_value)
    return names
