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

SHT_SYMTAB, SHT_DYNSYM = 2, 11
STT_FUNC, STT_GNU_IFUNC = 2, 10
SHN_UNDEF = 0
_MAX_SECTIONS = 4096
MAX_FILE_BYTES = 2 << 30  # libcuda is ~100 MiB; refuse absurd sizes instead of reading them


class ElfError(Exception):
    """The file is not an ELF64 little-endian object we can read (message says why)."""


def defined_functions(path: str | Path) -> set[str]:
    """Names of functions (FUNC/IFUNC) the file defines in .dynsym and .symtab.

    Versioned names are returned without their version (`llabs`, not `llabs@@GLIBC_2.2.5`).
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


def _functions(data: bytes) -> set[str]:
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
    names: set[str] = set()
    for sh_type, offset, size, link, entsize in sections:
        if sh_type not in (SHT_SYMTAB, SHT_DYNSYM) or entsize < 24 or link >= len(sections):
            continue
        _t, str_off, str_size, _l, _e = sections[link]
        if offset + size > len(data) or str_off + str_size > len(data):
            raise ValueError("section beyond the end of the file")
        strtab = data[str_off : str_off + str_size]
        for sym in range(offset, offset + size - entsize + 1, entsize):
            st_name, st_info, _other, st_shndx = struct.unpack_from("<IBBH", data, sym)
            if st_shndx == SHN_UNDEF or (st_info & 0xF) not in (STT_FUNC, STT_GNU_IFUNC):
                continue
            end = strtab.find(b"\0", st_name)
            if st_name and end > st_name:
                names.add(strtab[st_name:end].decode("ascii", "replace").split("@", 1)[0])
    return names
