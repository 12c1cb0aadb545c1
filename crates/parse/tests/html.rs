//! HTML pages: the main content when it holds the page's text, the full page (without its
//! chrome) when the main-content extraction would drop most of it; the choice is recorded.

use fathom_parse::{DocKind, ExtractionMethod, ParsedDoc, parse_content};

fn parse(html: &str) -> ParsedDoc {
    parse_content("https://pages.example/p", DocKind::Html, html.as_bytes()).unwrap()
}

/// The word counts an extraction's reason gives: (main content, full page).
fn counts(reason: &str) -> (usize, usize) {
    let rest = reason
        .strip_prefix("main content kept ")
        .unwrap_or_default();
    let numbers: Vec<usize> = rest
        .split(' ')
        .filter_map(|w| w.parse().ok())
        .take(2)
        .collect();
    assert_eq!(numbers.len(), 2, "{reason}");
    (numbers[0], numbers[1])
}

fn all_text(doc: &ParsedDoc) -> String {
    doc.blocks
        .iter()
        .map(|b| b.text.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Navigation, a sidebar and a footer of links, as most sites have.
fn chrome(body: &str) -> String {
    let links: String = (1..=30)
        .map(|i| format!(r#"<li><a href="/section/{i}">Section number {i} of the site</a></li>"#))
        .collect();
    format!(
        r#"<html><head><title>Weather notes</title><style>body {{ color: red }}</style></head><body>
        <header><a href="/">Weather notes home</a><nav><ul>{links}</ul></nav></header>
        {body}
        <aside><h3>Popular</h3><ul>{links}</ul></aside>
        <div class="site-footer"><ul>{links}</ul><p>Copyright the weather notes team.</p></div>
        <script>var tracking = "script words never count";</script>
        </body></html>"#
    )
}

#[test]
fn a_page_whose_table_the_main_content_drops_is_read_in_full() {
    // Readability keeps the intro paragraph and drops the long table beside it.
    let rows: String = (1..=40)
        .map(|i| {
            format!(
                "<tr><td>Station {i}</td><td>{} mm of rain in March</td><td>{} days of frost</td></tr>",
                i * 7,
                i % 9
            )
        })
        .collect();
    let html = chrome(&format!(
        r#"<div class="intro"><h1>Rainfall by station</h1><p>This page lists the rainfall
        measured at each of the forty stations of the network during March, with the number of
        frost days, as reported by the observers on the first of April in their monthly
        summaries.</p></div>
        <div class="data"><table><tr><th>Station</th><th>Rain</th><th>Frost</th></tr>{rows}</table></div>"#
    ));
    let doc = parse(&html);
    let how = doc
        .extraction
        .as_ref()
        .expect("HTML records its extraction");
    assert_eq!(how.method, ExtractionMethod::FullPage, "{how:?}");
    let (main, full) = counts(&how.reason);
    assert!(main * 10 < full, "{how:?}");
    assert!(how.reason.ends_with("; used the full page"), "{how:?}");
    let text = all_text(&doc);
    assert!(text.contains("This page lists the rainfall"), "{text}");
    assert!(
        text.contains("Station 17 \\| 119 mm of rain in March \\| 8 days of frost"),
        "{text}"
    );
    assert!(text.contains("Station 40 \\| 280 mm"), "{text}");
    // The chrome stays out of the full page too.
    for chrome in [
        "Section number",
        "Weather notes home",
        "Popular",
        "script words",
    ] {
        assert!(!text.contains(chrome), "{chrome} in {text}");
    }
    assert_eq!(doc.title, "Weather notes");
    // Recorded in what is stored.
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(json["extraction"]["method"], "full_page", "{json}");
}

#[test]
fn an_article_page_keeps_the_main_content_and_says_so() {
    let paras: String = [
        "Spring arrived late in the north this year. The first week of April brought snow to \
         the coast, and the fjords froze again for a few days before the thaw finally came.",
        "Observers at the forty stations of the network reported rainfall well above the \
         average of the last thirty years, with the western stations wettest of all.",
        "Farmers delayed their sowing by two weeks on average. Several said the ground was too \
         wet to carry machines until the last days of the month.",
        "The meteorological institute expects a dry May, which would let the soil recover, \
         but warns that its seasonal forecasts are uncertain this far north.",
        "Readers can find the station data in the monthly tables, published on the first day \
         of each month together with the observers' notes and corrections.",
        "In the south the picture was different: a mild and dry April let the orchards bloom \
         early, and the first cherries are expected before the middle of June.",
        "Along the coast the fishing fleet stayed in port for nine days, the longest stretch \
         since the storms of the winter of 2015, and prices at the market rose accordingly.",
        "Hydropower producers welcomed the rain. Their reservoirs, low after a dry autumn, are \
         now close to the level usual for the season, which should keep prices down.",
        "The institute will publish its full report on the spring at the end of June, with the \
         data from all stations and a comparison with the records since 1900.",
    ]
    .iter()
    .map(|p| format!("<p>{p}</p>"))
    .collect();
    let html = chrome(&format!(
        r#"<main><article><header><h1>A late spring</h1><p class="byline">By the desk</p></header>
        {paras}<footer><p>Filed under spring.</p></footer></article></main>
        <div class="newsletter"><p>Get the weather notes in your inbox every Monday morning,
        free of charge, and unsubscribe whenever you like.</p></div>"#
    ));
    let doc = parse(&html);
    let how = doc
        .extraction
        .as_ref()
        .expect("HTML records its extraction");
    assert_eq!(how.method, ExtractionMethod::MainContent, "{how:?}");
    // Chosen on its share of a page large enough for the share to count, not for a lack of
    // text: the page has prose besides the article.
    let (main, full) = counts(&how.reason);
    assert!(full >= 150 && main < full, "{how:?}");
    assert!(!how.reason.contains("full page"), "{how:?}");
    let text = all_text(&doc);
    assert!(text.contains("Spring arrived late in the north"), "{text}");
    assert!(text.contains("published on the first day"), "{text}");
    for chrome in ["Section number", "Copyright", "Popular"] {
        assert!(!text.contains(chrome), "{chrome} in {text}");
    }
    let json = serde_json::to_value(&doc).unwrap();
    assert_eq!(json["extraction"]["method"], "main_content", "{json}");
}

#[test]
fn only_html_records_an_extraction_and_old_records_still_load() {
    let doc = parse_content(
        "file:///notes.md",
        DocKind::Markdown,
        b"# Notes\n\nPlain words here.",
    )
    .unwrap();
    assert_eq!(doc.extraction, None);
    let json = serde_json::to_value(&doc).unwrap();
    assert!(json.get("extraction").is_none(), "{json}");
    assert!(json.get("unread").is_none(), "{json}");
    // A document stored before these fields existed reads back with none of them.
    let old = serde_json::json!({
        "url": "file:///notes.md", "title": "Notes", "kind": "markdown",
        "blocks": [{"heading": "Notes", "text": "Plain words here."}], "words": 3
    });
    let back: ParsedDoc = serde_json::from_value(old).unwrap();
    assert_eq!(back, doc);
}

/// A hostile page nested 100,000 `div`s deep (hours of parsing as written) is flattened at
/// the depth browsers stop at: the text past the cap is kept and the cut is recorded.
#[test]
fn a_page_nested_100000_deep_is_flattened_and_read() {
    let depth = 100_000;
    let html = format!(
        "<html><head><title>Deep page</title></head><body><article><h1>Deep page</h1>\
         <p>Rain in Bergen fell on 190 days of the year, more than in any other city of the \
         survey.</p></article>{}Words at the very bottom.{}</body></html>",
        "<div>".repeat(depth),
        "</div>".repeat(depth)
    );
    let doc = parse_content("https://pages.example/deep", DocKind::Html, html.as_bytes()).unwrap();
    assert!(
        all_text(&doc).contains("Words at the very bottom."),
        "{doc:?}"
    );
    assert_eq!(doc.unread.len(), 1, "{:?}", doc.unread);
    assert!(
        doc.unread[0].contains("deeper than 512 levels")
            && doc.unread[0].contains(&format!("{} tags", depth + 2 - 512)),
        "{:?}",
        doc.unread
    );
    // An ordinary page records no cut.
    let plain = "<html><body><article><p>Rain fell on 190 days.</p></article></body></html>";
    assert!(parse(plain).unread.is_empty());
}
