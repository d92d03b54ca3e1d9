//! WebShop's pages as text: its action grammar, the page kinds, and the reading of an
//! observation into segments (see the parent module's table of what the pages look like).

/// One action in WebShop's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WebShopAction<'a> {
    /// `search[keywords]`: the keywords as written.
    Search(&'a str),
    /// `click[value]`: the clicked value as written (an ASIN, an option, `Buy Now`, …).
    Click(&'a str),
    /// Anything else (WebShop ignores it).
    Other,
}

impl<'a> WebShopAction<'a> {
    /// Parses `action` like WebShop's `parse_action` (`re.match(r'(.+)\[(.+)\]', action)`):
    /// on the first line, the argument lies between the last `[` that has at least one
    /// character before it and one before the last `]`, and that `]`; text after the `]` is
    /// ignored. The name is then compared with `search` / `click` ignoring ASCII case and
    /// surrounding whitespace (WebShop wants them exact; an action it rejects leaves the page
    /// unchanged, which the phase machine sees). Never panics.
    pub(crate) fn parse(action: &'a str) -> Self {
        let line = match action.split('\n').next() {
            Some(line) => line,
            None => return Self::Other,
        };
        let Some(close) = line.rfind(']') else {
            return Self::Other;
        };
        // `(.+)\[` greedy: the last `[` at index >= 1 leaving >= 1 character before `close`.
        let open = line[..close]
            .rmatch_indices('[')
            .map(|(i, _)| i)
            .find(|&i| i >= 1 && i + 1 < close);
        let Some(open) = open else {
            return Self::Other;
        };
        let name = line[..open].trim();
        let arg = &line[open + 1..close];
        if name.eq_ignore_ascii_case("search") {
            Self::Search(arg)
        } else if name.eq_ignore_ascii_case("click") {
            Self::Click(arg)
        } else {
            Self::Other
        }
    }
}

/// The kind of WebShop page an observation shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub(crate) enum WebShopPage {
    /// The start page with the search box.
    Search,
    /// A page of search results.
    Results,
    /// A product page (options, price, `Buy Now`).
    Item,
    /// A product's description, features, reviews or attributes page.
    ItemDetail,
    /// The page after `Buy Now`.
    Done,
    /// Not recognisable as a WebShop page.
    Unknown,
}

impl WebShopPage {
    /// Classifies an observation (see the module docs for the cues). The done page wins over
    /// everything, then results, item, item detail, search.
    pub(crate) fn classify(observation: &str) -> Self {
        let (mut done, mut results, mut buy, mut prev, mut search) = (false, false, false, false, false);
        for seg in segments(observation) {
            if seg.starts_with("Thank you for shopping with us") {
                done = true;
            } else if is_results_header(seg) {
                results = true;
            } else if seg.eq_ignore_ascii_case("buy now") {
                buy = true;
            } else if seg.eq_ignore_ascii_case("< prev") || seg.eq_ignore_ascii_case("< back to results") {
                prev = true;
            } else if seg.eq_ignore_ascii_case("search") {
                search = true;
            }
        }
        if done {
            Self::Done
        } else if results {
            Self::Results
        } else if buy {
            Self::Item
        } else if prev {
            Self::ItemDetail
        } else if search {
            Self::Search
        } else {
            Self::Unknown
        }
    }
}

/// The segments of an observation: cut at `[SEP]` and newlines, trimmed of whitespace,
/// `[button]` / `[clicked button]` markers and one pair of enclosing single quotes; empty
/// segments dropped.
pub(super) fn segments(observation: &str) -> impl Iterator<Item = &str> {
    observation
        .split('\n')
        .flat_map(|line| line.split("[SEP]"))
        .map(clean_segment)
        .filter(|s| !s.is_empty())
}

pub(super) fn clean_segment(segment: &str) -> &str {
    let mut s = segment.trim();
    for (open, close) in [
        ("[clicked button]", "[clicked button_]"),
        ("[button]", "[button_]"),
    ] {
        if let Some(inner) = s.strip_prefix(open) {
            s = inner.strip_suffix(close).unwrap_or(inner).trim();
            break;
        }
    }
    if let Some(inner) = s.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')) {
        s = inner.trim();
    }
    s
}

/// `Page 1 (Total results: 50)` (text env) or `Page 1 (1-10) of 50 total results` (HTML
/// template).
pub(super) fn is_results_header(segment: &str) -> bool {
    segment.starts_with("Page ") && (segment.contains("Total results") || segment.contains("total results"))
}

/// ASINs as WebShop lists them: ten ASCII upper-case letters or digits (`B078GWRC1J`).
pub(super) fn is_listed_asin(segment: &str) -> bool {
    segment.len() == 10
        && segment
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// The title (segment before `Price: …`) and price of an item page.
pub(super) fn item_title_price(observation: &str) -> (&str, &str) {
    let mut previous = "";
    for seg in segments(observation) {
        if let Some(price) = seg.strip_prefix("Price:") {
            return (previous, price.trim());
        }
        previous = seg;
    }
    ("", "")
}

/// Characters of `s` trimmed, with whitespace runs collapsed to one space and lower-cased.
pub(super) fn normalized(s: &str) -> impl Iterator<Item = char> + '_ {
    let mut in_space = false;
    s.trim()
        .chars()
        .filter_map(move |c| {
            if c.is_whitespace() {
                if in_space {
                    None
                } else {
                    in_space = true;
                    Some(' ')
                }
            } else {
                in_space = false;
                Some(c)
            }
        })
        .flat_map(char::to_lowercase)
}

/// Case- and whitespace-insensitive equality, without allocating.
pub(super) fn norm_eq(a: &str, b: &str) -> bool {
    normalized(a).eq(normalized(b))
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use proptest::prelude::*;
    use regex::Regex;

    use super::{WebShopAction, WebShopPage};

    #[test]
    fn documented_examples() {
        assert_eq!(
            WebShopAction::parse("search[bright citrus deodorant]"),
            WebShopAction::Search("bright citrus deodorant")
        );
        assert_eq!(
            WebShopAction::parse("click[B078GWRC1J]"),
            WebShopAction::Click("B078GWRC1J")
        );
        assert_eq!(WebShopAction::parse("buy it"), WebShopAction::Other);
        // Same as WebShop: the greedy name swallows an earlier bracket.
        assert_eq!(WebShopAction::parse("click[a[b]]"), WebShopAction::Other);
        assert_eq!(WebShopAction::parse("click[]"), WebShopAction::Other);
        assert_eq!(
            WebShopAction::parse("Click[Buy Now] now"),
            WebShopAction::Click("Buy Now")
        );
        assert_eq!(
            WebShopAction::parse("search[x]\nclick[y]"),
            WebShopAction::Search("x")
        );
        let results = "'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'Next >' [SEP] 'B078GWRC1J' [SEP] 'Bright Citrus Deodorant' [SEP] '$10.99'";
        assert_eq!(WebShopPage::classify(results), WebShopPage::Results);
        assert_eq!(
            WebShopPage::classify("Thank you for shopping with us! [SEP] Your code:"),
            WebShopPage::Done
        );
        assert_eq!(WebShopPage::classify("Nothing to see"), WebShopPage::Unknown);
        let item = "Back to Search [SEP] < Prev [SEP] size [SEP] small [SEP] Soft Tee [SEP] Price: $9.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now";
        assert_eq!(WebShopPage::classify(item), WebShopPage::Item);
        assert_eq!(
            WebShopPage::classify("Back to Search [SEP] < Prev [SEP] A soft tee."),
            WebShopPage::ItemDetail
        );
        assert_eq!(
            WebShopPage::classify("WebShop [SEP] Instruction: [SEP] i need a tee [SEP] Search"),
            WebShopPage::Search
        );
    }

    const PREFIX: &str =
        "WebShop [SEP] Instruction: [SEP] i would like a 3 ounce bottle of bright citrus deodorant [SEP] ";
    const TITLE: &str = "Bright Citrus Deodorant by Earth Mama | Natural and Safe for Sensitive Skin";

    #[test]
    fn pages_are_classified() {
        let item = format!(
            "{PREFIX}Back to Search [SEP] < Prev [SEP] scent [SEP] bright citrus [SEP] size [SEP] 3 ounce (pack of 1) [SEP] {TITLE} [SEP] Price: $10.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
        );
        let results = format!(
            "{PREFIX}Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B078GWRC1J [SEP] {TITLE} [SEP] $10.99"
        );
        let detail =
            format!("{PREFIX}Back to Search [SEP] < Prev [SEP] Earth Mama's deodorant is free of aluminum.");
        let done = "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] Purchased [SEP] asin [SEP] B078GWRC1J [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0";
        assert_eq!(
            WebShopPage::classify(&format!("{PREFIX}Search")),
            WebShopPage::Search
        );
        assert_eq!(WebShopPage::classify(&results), WebShopPage::Results);
        assert_eq!(WebShopPage::classify(&item), WebShopPage::Item);
        assert_eq!(WebShopPage::classify(&detail), WebShopPage::ItemDetail);
        assert_eq!(WebShopPage::classify(done), WebShopPage::Done);
        // verl-agent's format: the prefix stripped, segments in single quotes.
        let quoted = |obs: &str| {
            let body = obs.strip_prefix(PREFIX).unwrap_or(obs);
            body.split(" [SEP] ")
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(" [SEP] ")
        };
        assert_eq!(WebShopPage::classify(&quoted(&item)), WebShopPage::Item);
        // `text_rich` mode: clickables in `[button] … [button_]`, one string a line.
        let rich = results
            .strip_prefix(PREFIX)
            .unwrap()
            .replace("Back to Search", "[button] Back to Search [button_]")
            .replace("Next >", "[button] Next > [button_]")
            .replace(" [SEP] ", "\n");
        assert_eq!(WebShopPage::classify(&rich), WebShopPage::Results);
        // The HTML template's results header.
        assert_eq!(
            WebShopPage::classify("Back to Search [SEP] Page 2 (11-20) of 50 total results [SEP] < Prev"),
            WebShopPage::Results
        );
        assert_eq!(WebShopPage::classify(""), WebShopPage::Unknown);
        assert_eq!(WebShopPage::classify("Nothing happens."), WebShopPage::Unknown);
    }

    /// Python's `re.match(r'(.+)\[(.+)\]', action)`: Rust's regex has the same leftmost-first,
    /// greedy semantics for this pattern, and `.` excludes only `\n` in both.
    fn reference_parse(action: &str) -> WebShopAction<'_> {
        static RE: OnceLock<Regex> = OnceLock::new();
        let re = RE.get_or_init(|| Regex::new(r"^(.+)\[(.+)\]").unwrap());
        match re.captures(action) {
            None => WebShopAction::Other,
            Some(c) => {
                let (name, arg) = (c.get(1).unwrap().as_str().trim(), c.get(2).unwrap().as_str());
                if name.eq_ignore_ascii_case("search") {
                    WebShopAction::Search(arg)
                } else if name.eq_ignore_ascii_case("click") {
                    WebShopAction::Click(arg)
                } else {
                    WebShopAction::Other
                }
            }
        }
    }

    fn tricky_text() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("[".to_owned()),
            Just("]".to_owned()),
            Just("[SEP]".to_owned()),
            Just(" [SEP] ".to_owned()),
            Just("\n".to_owned()),
            Just("'".to_owned()),
            Just("search".to_owned()),
            Just("click".to_owned()),
            Just("Buy Now".to_owned()),
            Just("< Prev".to_owned()),
            Just("Page 1 (Total results: 50)".to_owned()),
            Just("B078GWRC1J".to_owned()),
            Just("Thank you for shopping with us!".to_owned()),
            Just("[button] ".to_owned()),
            Just(" [button_]".to_owned()),
            any::<String>(),
            any::<char>().prop_map(String::from),
        ];
        prop::collection::vec(atom, 0..16).prop_map(|v| v.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn action_parse_agrees_with_the_environment_regex(action in tricky_text()) {
            prop_assert_eq!(WebShopAction::parse(&action), reference_parse(&action));
        }

        #[test]
        fn page_classification_never_panics(obs in tricky_text()) {
            let _ = WebShopPage::classify(&obs);
        }
    }
}
