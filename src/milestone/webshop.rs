//! WebShop page phases: Φ fires on the page transitions that advance toward the goal product
//! (the paper's WebShop detector, "page transitions advancing toward the target product").
//!
//! Four phases, in order, each firing at most once per trajectory and never undone
//! ([`WebShopPhase`]):
//!
//! 1. [`Found`](WebShopPhase::Found): a search-results page lists an item that satisfies the
//!    goal ([`WebShopGoal::item_matches`]);
//! 2. [`ItemPage`](WebShopPhase::ItemPage): the agent opens the page of such an item;
//! 3. [`OptionsChosen`](WebShopPhase::OptionsChosen): on that item's page, every option the goal
//!    requires ([`WebShopGoal::required_options`]) has been clicked (with no required option
//!    this phase is passed on the step that opens the page, which counts once);
//! 4. [`Purchased`](WebShopPhase::Purchased): `click[Buy Now]` on that page with those options
//!    selected reaches the done page.
//!
//! A phase fires only from the one before it (as in the paper's code release,
//! `migpo/webshop_milestone_detector.py`). Unlike the release, the option choices belong to
//! the current visit of the item page: going back to the results or the search page clears
//! them, as WebShop's session does, so buying after a detour needs the options clicked again,
//! and buying another item never counts.
//!
//! # What the pages look like
//!
//! WebShop's text environment (`web_agent_site/envs/web_agent_text_env.py`, observation mode
//! `text`) joins the visible strings of the page with `" [SEP] "`; verl-agent strips the
//! leading `WebShop [SEP] Instruction: [SEP] <instruction> [SEP]` and quotes each segment
//! (`'Back to Search' [SEP] 'Page 1 (Total results: 50)'`); mode `text_rich` puts one string a
//! line with `[button] … [button_]` around clickables. All three are read the same way: the
//! observation is cut at `[SEP]` and newlines, and each segment is trimmed of whitespace,
//! button markers and one pair of enclosing single quotes.
//!
//! | page | observation (mode `text`, instruction prefix omitted) | recognised by |
//! |---|---|---|
//! | search | `WebShop [SEP] Instruction: [SEP] i would like a 3 ounce bottle of bright citrus deodorant … [SEP] Search` | a `Search` segment |
//! | results | `Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B078GWRC1J [SEP] Bright Citrus Deodorant by Earth Mama \| Natural and Safe … [SEP] $10.99 [SEP] B078GTKVXY [SEP] …` | a `Page N (… results …)` segment; items are an ASIN segment, the title, the price |
//! | item | `Back to Search [SEP] < Prev [SEP] scent [SEP] assorted scents [SEP] bright citrus [SEP] … [SEP] size [SEP] travel set (4-pack) [SEP] 3 ounce (pack of 1) [SEP] … [SEP] Bright Citrus Deodorant by Earth Mama … [SEP] Price: $10.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now` | a `Buy Now` segment; the title is the segment before `Price: …` |
//! | item detail | `Back to Search [SEP] < Prev [SEP] <description, features or reviews>` | a `< Prev` segment without `Buy Now` |
//! | done | `Thank you for shopping with us! [SEP] Your code: [SEP] … [SEP] Your score (min 0.0, max 1.0) [SEP] 1.0` | the thank-you segment |
//!
//! Actions follow WebShop's grammar `search[keywords]` / `click[value]`, parsed by
//! [`WebShopAction::parse`] with the environment's own rule (regex `(.+)\[(.+)\]` on the first
//! line) and never panicking. An action the environment rejects leaves the page unchanged, so
//! it cannot advance a phase. Option values and `Buy Now` are compared case-insensitively with
//! whitespace collapsed (WebShop lowercases click arguments).
//!
//! Limitation: in mode `text` the item page does not show which option is selected, so the
//! detector tracks the option clicks of the current visit; clicking a second value of the same
//! option (a required `black`, then `white`) is not seen as unselecting the first.

use std::sync::Arc;

mod page;

use page::{is_listed_asin, item_title_price, norm_eq, normalized, segments};
use page::{WebShopAction, WebShopPage};

use super::{MilestoneDetector, Transition};
use crate::error::{Error, Result};

/// A product as a page shows it: what a [`WebShopGoal`] judges.
///
/// On a results page all three fields come from the listing; when the agent opens an item
/// page, `asin` is the clicked value (WebShop agents usually lowercase it) and `title` /
/// `price` come from the page (`price` without the `Price: ` label). A field the page does
/// not show is `""`.
///
/// ```
/// use beacon_rl::milestone::WebShopItem;
/// let item = WebShopItem { asin: "B078GWRC1J", title: "Bright Citrus Deodorant", price: "$10.99" };
/// assert!(item.asin.eq_ignore_ascii_case("b078gwrc1j"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WebShopItem<'a> {
    /// The product's ASIN, in the case the page or the action wrote it.
    pub asin: &'a str,
    /// The product title.
    pub title: &'a str,
    /// The displayed price (`$10.99`, `$4.99 to $12.99`).
    pub price: &'a str,
}

/// What the caller's task asks for: which products satisfy it and which options it needs.
///
/// The paper's release judges a product by the WebShop catalogue (attributes, available
/// options, price bound); implement [`item_matches`](Self::item_matches) the same way, or use
/// [`WebShopTarget`] to accept exactly the goal's ASIN. The goal must not change during a
/// trajectory.
///
/// ```
/// use beacon_rl::milestone::{WebShopGoal, WebShopItem};
///
/// struct Deodorant { options: Vec<String> }
/// impl WebShopGoal for Deodorant {
///     fn item_matches(&self, item: &WebShopItem<'_>) -> bool {
///         item.title.to_lowercase().contains("bright citrus deodorant")
///     }
///     fn required_options(&self) -> &[String] { &self.options }
/// }
/// let goal = Deodorant { options: vec!["3 ounce (pack of 1)".into()] };
/// assert!(goal.item_matches(&WebShopItem { title: "Bright Citrus Deodorant by Earth Mama", ..Default::default() }));
/// ```
pub trait WebShopGoal {
    /// Whether `item` satisfies the goal's product constraints.
    fn item_matches(&self, item: &WebShopItem<'_>) -> bool;

    /// The option values the goal requires, as the item page lists them (`"bright citrus"`,
    /// `"3 ounce (pack of 1)"`); compared case-insensitively with whitespace collapsed.
    fn required_options(&self) -> &[String];
}

impl<G: WebShopGoal + ?Sized> WebShopGoal for &G {
    fn item_matches(&self, item: &WebShopItem<'_>) -> bool {
        (**self).item_matches(item)
    }
    fn required_options(&self) -> &[String] {
        (**self).required_options()
    }
}

impl<G: WebShopGoal + ?Sized> WebShopGoal for Box<G> {
    fn item_matches(&self, item: &WebShopItem<'_>) -> bool {
        (**self).item_matches(item)
    }
    fn required_options(&self) -> &[String] {
        (**self).required_options()
    }
}

impl<G: WebShopGoal + ?Sized> WebShopGoal for Arc<G> {
    fn item_matches(&self, item: &WebShopItem<'_>) -> bool {
        (**self).item_matches(item)
    }
    fn required_options(&self) -> &[String] {
        (**self).required_options()
    }
}

/// A goal that accepts exactly one product, by ASIN (ASCII case ignored), with required
/// options: WebShop's own `goal["asin"]` and `goal["goal_options"]`.
///
/// ```
/// use beacon_rl::milestone::{WebShopGoal, WebShopItem, WebShopTarget};
/// let goal = WebShopTarget::new("B078GWRC1J", ["bright citrus", "3 ounce (pack of 1)"])?;
/// assert!(goal.item_matches(&WebShopItem { asin: "b078gwrc1j", ..Default::default() }));
/// assert_eq!(goal.required_options().len(), 2);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebShopTarget {
    asin: String,
    options: Vec<String>,
}

impl WebShopTarget {
    /// A target product and the options it must be bought with.
    ///
    /// # Errors
    /// [`Error::InvalidPattern`] when `asin` is empty or blank, or an option is blank (it
    /// could never be clicked).
    ///
    /// ```
    /// use beacon_rl::milestone::{WebShopGoal, WebShopItem, WebShopTarget};
    /// // The ASIN is trimmed and compared ignoring ASCII case.
    /// let goal = WebShopTarget::new(" B078GWRC1J ", Vec::<String>::new())?;
    /// assert!(goal.item_matches(&WebShopItem { asin: "b078gwrc1j", ..Default::default() }));
    /// assert!(WebShopTarget::new("", ["black"]).is_err());
    /// assert!(WebShopTarget::new("B078GWRC1J", ["  "]).is_err());
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new<S: Into<String>>(
        asin: impl Into<String>,
        options: impl IntoIterator<Item = S>,
    ) -> Result<Self> {
        let asin = asin.into().trim().to_owned();
        if asin.is_empty() {
            return Err(Error::InvalidPattern {
                pattern: asin,
                message: "the target ASIN is empty".to_owned(),
            });
        }
        let options: Vec<String> = options.into_iter().map(Into::into).collect();
        check_options(&options)?;
        Ok(Self { asin, options })
    }
}

impl WebShopGoal for WebShopTarget {
    fn item_matches(&self, item: &WebShopItem<'_>) -> bool {
        item.asin.trim().eq_ignore_ascii_case(&self.asin)
    }

    fn required_options(&self) -> &[String] {
        &self.options
    }
}

fn check_options(options: &[String]) -> Result<()> {
    match options.iter().find(|o| normalized(o).next().is_none()) {
        Some(blank) => Err(Error::InvalidPattern {
            pattern: blank.clone(),
            message: "a required WebShop option must contain a non-whitespace character".to_owned(),
        }),
        None => Ok(()),
    }
}

/// How far a trajectory has come toward the goal product (see the module docs).
///
/// Ordered: `Start < Found < ItemPage < OptionsChosen < Purchased`.
///
/// ```
/// use beacon_rl::milestone::WebShopPhase;
/// assert!(WebShopPhase::Found < WebShopPhase::Purchased);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum WebShopPhase {
    /// No milestone yet.
    Start,
    /// A results page listed a goal item.
    Found,
    /// A goal item's page was opened.
    ItemPage,
    /// Every required option was clicked on that page.
    OptionsChosen,
    /// The goal item was bought with its options.
    Purchased,
}

/// The WebShop phase machine (see the module docs): fires on the step that completes each of
/// the four phases, once per trajectory, in order.
///
/// ```
/// use beacon_rl::milestone::{WebShopPhase, WebShopPhases, WebShopTarget};
/// use beacon_rl::milestone::{MilestoneDetector, Transition};
///
/// let goal = WebShopTarget::new("B078GWRC1J", ["3 ounce (pack of 1)"])?;
/// let mut d = WebShopPhases::new(goal)?;
/// let item_page = "Back to Search [SEP] < Prev [SEP] size [SEP] travel set (4-pack) [SEP] 3 ounce (pack of 1) [SEP] Bright Citrus Deodorant [SEP] Price: $10.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now";
/// let session = [
///     ("search[bright citrus deodorant]", "Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B078GWRC1J [SEP] Bright Citrus Deodorant [SEP] $10.99"),
///     ("click[b078gwrc1j]", item_page),
///     ("click[3 ounce (pack of 1)]", item_page),
///     ("click[buy now]", "Thank you for shopping with us! [SEP] Your code: [SEP] None"),
/// ];
/// let flags: Vec<bool> = session
///     .iter()
///     .map(|&(action, next_observation)| d.detect(&Transition { action, next_observation, ..Default::default() }))
///     .collect();
/// assert_eq!(flags, [true, true, true, true]);
/// assert_eq!(d.phase(), WebShopPhase::Purchased);
/// # Ok::<(), beacon_rl::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct WebShopPhases<G> {
    goal: G,
    phase: WebShopPhase,
    /// The page the previous step ended on (the start page after a reset).
    page: WebShopPage,
    /// Whether the current item page (or its detail pages) is a goal item's.
    on_goal_item: bool,
    /// Required options clicked during the current visit of the goal item, by index.
    chosen: Vec<bool>,
}

impl<G: WebShopGoal> WebShopPhases<G> {
    /// A phase machine for `goal`, at [`WebShopPhase::Start`] on the search page.
    ///
    /// # Errors
    /// [`Error::InvalidPattern`] when a required option is blank (it could never be clicked).
    ///
    /// ```
    /// use beacon_rl::milestone::{WebShopPhase, WebShopPhases, WebShopTarget};
    /// let d = WebShopPhases::new(WebShopTarget::new("B09XYZ1234", ["black"])?)?;
    /// assert_eq!(d.phase(), WebShopPhase::Start);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn new(goal: G) -> Result<Self> {
        check_options(goal.required_options())?;
        let chosen = vec![false; goal.required_options().len()];
        Ok(Self {
            goal,
            phase: WebShopPhase::Start,
            page: WebShopPage::Search,
            on_goal_item: false,
            chosen,
        })
    }

    /// The phase reached so far in the current trajectory.
    ///
    /// ```
    /// use beacon_rl::milestone::{WebShopPhase, WebShopPhases, WebShopTarget};
    /// let d = WebShopPhases::new(WebShopTarget::new("B09XYZ1234", Vec::<String>::new())?)?;
    /// assert_eq!(d.phase(), WebShopPhase::Start);
    /// # Ok::<(), beacon_rl::Error>(())
    /// ```
    pub fn phase(&self) -> WebShopPhase {
        self.phase
    }

    fn leave_item(&mut self) {
        self.on_goal_item = false;
        self.chosen.fill(false);
    }

    fn all_chosen(&self) -> bool {
        self.chosen.iter().all(|&c| c)
    }

    /// Records an option click on the goal item's page, if the page offers that value.
    fn choose(&mut self, value: &str, observation: &str) {
        if !segments(observation).any(|seg| norm_eq(seg, value)) {
            return;
        }
        for (slot, option) in self.chosen.iter_mut().zip(self.goal.required_options()) {
            if norm_eq(option, value) {
                *slot = true;
            }
        }
    }
}

impl<G: WebShopGoal> MilestoneDetector for WebShopPhases<G> {
    fn detect(&mut self, t: &Transition<'_>) -> bool {
        let obs = t.next_observation;
        let action = WebShopAction::parse(t.action);
        let page = WebShopPage::classify(obs);
        let previous = self.page;
        let mut fired = false;
        match page {
            // Not a WebShop page: keep the context rather than guess.
            WebShopPage::Unknown => return false,
            WebShopPage::Search => self.leave_item(),
            WebShopPage::Results => {
                self.leave_item();
                if self.phase == WebShopPhase::Start && lists_goal_item(&self.goal, obs) {
                    self.phase = WebShopPhase::Found;
                    fired = true;
                }
            }
            WebShopPage::Item => {
                if matches!(previous, WebShopPage::Item | WebShopPage::ItemDetail) {
                    // Same item: an option click, a detail page's `< Prev`, or a no-op.
                    if self.on_goal_item {
                        if let WebShopAction::Click(value) = action {
                            self.choose(value, obs);
                        }
                    }
                } else {
                    // Entering an item page: from the results, the clicked value is the ASIN.
                    self.leave_item();
                    if let WebShopAction::Click(asin) = action {
                        let (title, price) = item_title_price(obs);
                        let item = WebShopItem {
                            asin: asin.trim(),
                            title,
                            price,
                        };
                        self.on_goal_item = self.goal.item_matches(&item);
                    }
                }
                if self.on_goal_item {
                    if self.phase == WebShopPhase::Found {
                        self.phase = WebShopPhase::ItemPage;
                        fired = true;
                    }
                    // With no required option this passes on the entering step too.
                    if self.phase == WebShopPhase::ItemPage && self.all_chosen() {
                        self.phase = WebShopPhase::OptionsChosen;
                        fired = true;
                    }
                }
            }
            WebShopPage::ItemDetail => {}
            WebShopPage::Done => {
                let buy = matches!(action, WebShopAction::Click(v) if norm_eq(v, "buy now"));
                if buy && self.on_goal_item && self.all_chosen() && self.phase == WebShopPhase::OptionsChosen
                {
                    self.phase = WebShopPhase::Purchased;
                    fired = true;
                }
                self.leave_item();
            }
        }
        self.page = page;
        fired
    }

    fn reset(&mut self) {
        self.phase = WebShopPhase::Start;
        self.page = WebShopPage::Search;
        // A goal whose option list changed length gets a matching slot vector.
        self.chosen.resize(self.goal.required_options().len(), false);
        self.leave_item();
    }
}

/// Whether a results page lists an item the goal accepts.
fn lists_goal_item<G: WebShopGoal + ?Sized>(goal: &G, observation: &str) -> bool {
    let mut segs = segments(observation).peekable();
    while let Some(seg) = segs.next() {
        if !is_listed_asin(seg) {
            continue;
        }
        let title = match segs.peek() {
            Some(&s) if !is_listed_asin(s) => {
                segs.next();
                s
            }
            _ => "",
        };
        let price = match segs.peek() {
            Some(&s) if s.starts_with('$') => {
                segs.next();
                s
            }
            _ => "",
        };
        if goal.item_matches(&WebShopItem {
            asin: seg,
            title,
            price,
        }) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_parse_matches_webshop_regex_semantics() {
        // Hand-derived from Python's re.match(r'(.+)\[(.+)\]', s).groups().
        assert_eq!(WebShopAction::parse("x[y[]"), WebShopAction::Other); // name "x", arg "y["
        assert_eq!(WebShopAction::parse("click[[x]"), WebShopAction::Other); // name "click["
        assert_eq!(WebShopAction::parse("click[a]b]"), WebShopAction::Click("a]b"));
        assert_eq!(WebShopAction::parse("[x]"), WebShopAction::Other);
        assert_eq!(WebShopAction::parse(" click [ x ]"), WebShopAction::Click(" x "));
        assert_eq!(WebShopAction::parse("clíck[x]"), WebShopAction::Other);
        assert_eq!(WebShopAction::parse("search[é]]"), WebShopAction::Search("é]"));
    }

    #[test]
    fn segments_strip_quotes_and_buttons() {
        let segs: Vec<&str> =
            segments("'Back to Search' [SEP] [button] Buy Now [button_]\n\n'x' [SEP] '").collect();
        assert_eq!(segs, ["Back to Search", "Buy Now", "x", "'"]);
    }

    #[test]
    fn normalized_equality() {
        assert!(norm_eq("  3 Ounce\t(Pack  of 1) ", "3 ounce (pack of 1)"));
        assert!(!norm_eq("3 ounce", "3 ounces"));
        assert!(!norm_eq("", "a"));
    }
}
