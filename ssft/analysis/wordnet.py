"""WordNet and NLTK data for the ambiguity analysis, fully offline.

pywsd 1.3 reads senses from the ``wn`` package's lexicon ``oewn:2024`` (Open English WordNet 2024) and lemmatises
with NLTK (perceptron tagger, WordNet 3.0 lemmatiser, punkt tokenizer). Where each comes from:

- the OEWN 2024 WN-LMF XML: ``$SSFT_WORDNET_XML``, else ``$SSFT_DATA_HOME/wordnet/english-wordnet-2024.xml.gz``;
- the ``wn`` database it is added to (once, ~20-30 s): ``$WN_DATA_DIR`` (``wn``'s own variable), else
  ``$SSFT_CACHE/wn`` (default ``~/.cache/ssft/wn``); later calls reuse it;
- NLTK data: ``$NLTK_DATA`` (NLTK's own variable) and NLTK's default folders, then ``$SSFT_DATA_HOME/nltk_data``.

pywsd downloads ``oewn:2024`` from the network when ``wn`` lacks it; ``load_wordnet`` adds the lexicon first and
hands pywsd the opened lexicon, so nothing is ever downloaded.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from ssft.core.errors import SsftError
from ssft.data.beir import cache_home

LEXICON = "oewn:2024"  # the lexicon pywsd 1.3 asks for
WORDNET_XML_NAME = "english-wordnet-2024.xml.gz"
# NLTK resources pywsd's lemmatiser, tagger and tokenizer load (name for `nltk.download`, path for nltk.data.find)
NLTK_RESOURCES = {
    "averaged_perceptron_tagger_eng": "taggers/averaged_perceptron_tagger_eng/",
    "wordnet": "corpora/wordnet/",  # the trailing slash lets NLTK look inside wordnet.zip
    "punkt_tab": "tokenizers/punkt_tab/english/",
}
_HOW_TO_GET_WORDNET = (
    "get Open English WordNet 2024 (english-wordnet-2024.xml.gz, a release asset of "
    "github.com/globalwordnet/english-wordnet) and set SSFT_WORDNET_XML to it, or put it under "
    "$SSFT_DATA_HOME/wordnet/; online, `python -m wn download oewn:2024` works too"
)

_loaded = None  # the opened wn.Wordnet, once per process


def wordnet_xml_path() -> Path | None:
    """The OEWN 2024 XML named by ``$SSFT_WORDNET_XML`` or found under ``$SSFT_DATA_HOME/wordnet``."""
    explicit = os.environ.get("SSFT_WORDNET_XML")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise SsftError(f"SSFT_WORDNET_XML={explicit}: no such file; {_HOW_TO_GET_WORDNET}")
        return path
    home = os.environ.get("SSFT_DATA_HOME")
    if home:
        path = Path(home).expanduser() / "wordnet" / WORDNET_XML_NAME
        if path.is_file():
            return path
    return None


def wn_data_dir() -> Path:
    """Where the ``wn`` database lives: ``$WN_DATA_DIR``, else ``$SSFT_CACHE/wn``."""
    explicit = os.environ.get("WN_DATA_DIR")
    if explicit:
        return Path(explicit).expanduser()

    return cache_home() / "wn"


def _has_lexicon(wn_module) -> bool:
    return any(lex.specifier() == LEXICON for lex in wn_module.lexicons())


def _use_data_dir(wn_module, path: Path) -> None:
    wn_module._db.clear_connections()  # wn caches one sqlite connection per database path
    wn_module.config.data_directory = path


def load_wordnet(data_dir: str | Path | None = None, xml: str | Path | None = None):
    """The ``oewn:2024`` lexicon as a ``wn.Wordnet``, added from the XML into ``data_dir`` the first time.

    A fresh database is built in a temporary folder beside ``data_dir`` and renamed into place, so an interrupted
    build never leaves a half-filled database that looks ready. Also makes pywsd use this lexicon."""
    global _loaded
    import wn  # noqa: PLC0415  (heavy optional library, loaded on first use)

    target = Path(data_dir).expanduser() if data_dir else wn_data_dir()
    if _loaded is not None and Path(wn.config.data_directory) == target:
        return _loaded
    _use_data_dir(wn, target)
    if not (target / "wn.db").is_file() or not _has_lexicon(wn):
        source = Path(xml).expanduser() if xml else wordnet_xml_path()
        if source is None or not source.is_file():
            raise SsftError(f"WordNet lexicon {LEXICON} is not in {target} and no XML to add it from"
                            f"{f' ({source} missing)' if source else ''}: {_HOW_TO_GET_WORDNET}")
        if (target / "wn.db").is_file():  # a user's wn folder with other lexicons: add into it
            _add(wn, source)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            building = Path(tempfile.mkdtemp(prefix=f".{target.name}.building-", dir=target.parent))
            try:
                _use_data_dir(wn, building)
                _add(wn, source)
                wn._db.clear_connections()
                try:
                    os.replace(building, target)  # atomic; fails if another process filled target first
                except OSError:
                    if not (target / "wn.db").is_file():
                        raise
            finally:
                shutil.rmtree(building, ignore_errors=True)
            _use_data_dir(wn, target)
        if not _has_lexicon(wn):
            raise SsftError(f"{source}: added to {target} but no lexicon {LEXICON} appeared (not the OEWN 2024 XML?)")
    lexicon = wn.Wordnet(LEXICON)
    import pywsd._wordnet  # noqa: PLC0415  (heavy optional library, loaded on first use)

    pywsd._wordnet._instance = lexicon  # pywsd would otherwise download the lexicon when its own lookup fails
    _loaded = lexicon
    return lexicon


def _add(wn_module, source: Path) -> None:
    try:
        wn_module.add(str(source), progress_handler=None)
    except Exception as err:  # wn raises its own errors and XML errors for a bad file
        first = str(err).splitlines()[0] if str(err) else ""
        raise SsftError(f"{source}: cannot be added to WordNet ({type(err).__name__}: {first})") from None


def ensure_nltk_data() -> None:
    """Make NLTK find the tagger, WordNet 3.0 and punkt_tab: ``$NLTK_DATA`` and NLTK's default folders first,
    then ``$SSFT_DATA_HOME/nltk_data``. One clear error naming what is missing otherwise."""
    import nltk  # noqa: PLC0415  (heavy optional library, loaded on first use)

    home = os.environ.get("SSFT_DATA_HOME")
    if home:
        shipped = str(Path(home).expanduser() / "nltk_data")
        if Path(shipped).is_dir() and shipped not in nltk.data.path:
            nltk.data.path.append(shipped)
    missing = []
    for name, resource in NLTK_RESOURCES.items():
        try:
            nltk.data.find(resource)
        except LookupError:
            missing.append(name)
    if missing:
        raise SsftError(f"NLTK data missing: {', '.join(missing)} (searched {', '.join(nltk.data.path)}); point NLTK_DATA "
                        f"at a folder holding them, or online run `python -m nltk.downloader {' '.join(missing)}`")


def setup(data_dir: str | Path | None = None, xml: str | Path | None = None):
    """NLTK data checked and the OEWN lexicon loaded: everything pywsd needs. Returns the ``wn.Wordnet``."""
    ensure_nltk_data()
    return load_wordnet(data_dir, xml)


__all__ = ["LEXICON", "NLTK_RESOURCES", "ensure_nltk_data", "load_wordnet", "setup", "wn_data_dir", "wordnet_xml_path"]
