"""A page canvas that draws text word by word and records every word's pixel box."""

from __future__ import annotations

import functools
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from ..record import Box, Word, union_box

FONT_DIRS = [
    Path("/usr/share/fonts/truetype/dejavu"),
    Path("/usr/share/fonts/truetype/liberation"),
    Path("/usr/share/fonts/truetype/liberation2"),
]
FAMILIES = {
    "sans": ["DejaVuSans.ttf", "LiberationSans-Regular.ttf"],
    "sans-bold": ["DejaVuSans-Bold.ttf", "LiberationSans-Bold.ttf"],
    "serif": ["DejaVuSerif.ttf", "LiberationSerif-Regular.ttf"],
    "serif-bold": ["DejaVuSerif-Bold.ttf", "LiberationSerif-Bold.ttf"],
    "mono": ["DejaVuSansMono.ttf", "LiberationMono-Regular.ttf"],
}


def bundled_font_dir() -> Path | None:
    """The DejaVu fonts matplotlib (a docjepa dependency) carries: the fonts of a machine with none installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    return folder if folder.is_dir() else None


@functools.cache
def available_fonts() -> dict[str, list[Path]]:
    """Installed font files per family; where the system has none of them, matplotlib's DejaVu; empty lists when
    neither is there."""

    def found(dirs: list[Path]) -> dict[str, list[Path]]:
        return {fam: [d / n for n in names for d in dirs if (d / n).is_file()] for fam, names in FAMILIES.items()}

    fonts = found(FONT_DIRS)
    bundled = bundled_font_dir()
    if not any(fonts.values()) and bundled is not None:
        fonts = found([bundled])
    return fonts


@functools.lru_cache(maxsize=256)
def load_font(family: str, size: int, choice: int = 0) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    """A TrueType font of ``family`` at ``size`` px; Pillow's built-in font if none is installed."""
    files = available_fonts().get(family) or available_fonts()["sans"]
    if files:
        return ImageFont.truetype(str(files[choice % len(files)]), size)
    return ImageFont.load_default(size=size)


class Canvas:
    """A white page; text drawn through it is recorded as words in drawing (reading) order."""

    def __init__(self, width: int, height: int, font_choice: int = 0) -> None:
        self.width, self.height = width, height
        self.image = Image.new("RGB", (width, height), "white")
        self.draw = ImageDraw.Draw(self.image)
        self.words: list[Word] = []
        self.font_choice = font_choice
        self.unit = height / 1000  # layouts are written in thousandths of the page height

    def font(self, family: str, size: float):
        return load_font(family, max(6, round(size * self.unit)), self.font_choice)

    def px(self, v: float) -> float:
        return v * self.unit

    def _word(self, x: float, y: float, token: str, font, fill: str) -> int:
        """Draw one word at (x, y) and record its box; returns its id."""
        self.draw.text((x, y), token, font=font, fill=fill)
        x0, y0, x1, y1 = self.draw.textbbox((x, y), token, font=font)
        self.words.append(Word(token, (float(x0), float(y0), float(x1), float(y1))))
        return len(self.words) - 1

    def text(
        self,
        x: float,
        y: float,
        text: str,
        family: str = "sans",
        size: float = 14,
        fill: str = "black",
        max_x: float | None = None,
    ) -> list[int]:
        """Draw ``text`` on one line from (x, y) (in px); returns the ids of the words drawn."""
        font = self.font(family, size)
        space = font.getlength(" ")
        ids = []
        for token in text.split():
            width = font.getlength(token)
            if max_x is not None and x + width > max_x and ids:
                break
            ids.append(self._word(x, y, token, font, fill))
            x += width + space
        return ids

    def paragraph(
        self,
        x: float,
        y: float,
        width: float,
        text: str,
        family: str = "serif",
        size: float = 13,
        leading: float = 1.35,
        fill: str = "black",
    ) -> tuple[list[int], float]:
        """Word-wrap ``text`` into ``width`` px from (x, y); returns (word ids, y below the last line)."""
        font = self.font(family, size)
        line_h = font.size * leading
        space = font.getlength(" ")
        ids, cx = [], x
        for token in text.split():
            w = font.getlength(token)
            if cx > x and cx + w > x + width:
                cx, y = x, y + line_h
            if y + line_h > self.height:
                break
            ids.append(self._word(cx, y, token, font, fill))
            cx += w + space
        return ids, y + line_h

    def box_of(self, ids: list[int], pad: float = 2.0) -> Box:
        """The box around the given words."""
        return union_box([self.words[i].box for i in ids], pad)

    def rect(self, box: Box, outline: str = "black", width: int = 1, fill: str | None = None) -> None:
        self.draw.rectangle(box, outline=outline, width=width, fill=fill)

    def hline(self, x0: float, x1: float, y: float, width: int = 1, fill: str = "black") -> None:
        self.draw.line([(x0, y), (x1, y)], fill=fill, width=width)
