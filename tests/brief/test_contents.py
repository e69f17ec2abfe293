"""The brief's Contents box: below the title, linking every top-level heading."""
from storagebrief.brief.render import with_contents


def test_contents_come_below_the_title_and_link_every_section():
    body = "<div><h1>Storage performance brief</h1><p>cover</p></div><div><h2>Snapshot</h2></div><h2>Appendix A</h2>"
    out = with_contents(body)
    assert out.index("<h1>") < out.index('id="contents"') < out.index("<h2")
    assert 'href="#snapshot"' in out.lower() and out.count("<li") == 2


def test_without_a_title_the_contents_open_the_page():
    assert with_contents("<h2>Only</h2>").startswith('<nav class="toc"')
